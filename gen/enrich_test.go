package gen

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/spec"
)

// TestEnrichLeavesDocument: the enriched copy is built from the document
// the generator reads, so it must not change it.
func TestEnrichLeavesDocument(t *testing.T) {
	for _, name := range []string{"all_fields", "declared_header", "client", "openapi31", "body_pointer"} {
		t.Run(name, func(t *testing.T) {
			doc, err := spec.Load(filepath.Join(goldenDir, name, "api.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			before, err := json.Marshal(doc.OpenAPI)
			if err != nil {
				t.Fatal(err)
			}
			enriched, err := Enrich(doc, "openapi.json", Settings{})
			if err != nil {
				t.Fatal(err)
			}
			after, err := json.Marshal(doc.OpenAPI)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(before), string(after)); diff != "" {
				t.Errorf("Enrich changed the document (-before +after):\n%s", diff)
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, enriched); err != nil {
				t.Fatal(err)
			}
			if compact.String() == string(before) {
				t.Error("the enriched copy is the document unchanged")
			}
		})
	}
}
