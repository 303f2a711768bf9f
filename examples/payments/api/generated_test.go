package api

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/gen"
)

// TestGeneratedUpToDate: the generated files are exactly what the generator
// makes from ../api.yaml now (nobody edited them by hand, and nobody forgot
// to run go generate).
func TestGeneratedUpToDate(t *testing.T) {
	res, err := gen.Generate(gen.Config{Spec: "../api.yaml", Package: "api", Output: ".", OpenAPIOut: "../openapi.idempotent.yaml", ClientOut: "../payclient", NoScaffold: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Files {
		disk, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(disk), string(f.Data)); diff != "" {
			t.Errorf("%s is stale; run go generate ./examples/... (-disk +generated):\n%s", f.Path, diff)
		}
	}
}
