package spec

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestErrorsInAnotherFile: an operation whose path item is in another file
// (a $ref) is reported at its own file and line, not at the root
// document's.
func TestErrorsInAnotherFile(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"api.yaml": `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /a:
    post:
      operationId: createA
      x-idempotency: {scope: tenant}
      responses: {"201": {description: ok}}
  /b:
    $ref: 'paths/b.yaml'
`,
		"paths/b.yaml": `post:
  operationId: createB
  x-idempotency:
    lease: 10s
    scope: nobody
  responses: {"201": {description: ok}}
`,
	}
	writeSpec(t, dir, files)
	root := filepath.Join(dir, "api.yaml")
	_, err := Load(root)
	es, ok := err.(Errors)
	if !ok {
		t.Fatalf("Load: %v", err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Error())
	}
	want := []string{
		root + `:7: POST /a (createA): x-idempotency.scope: "tenant" is not a scope; use principal, global, header:<Header-Name>, path:<param> or sender:<name> (principal+header:<Header-Name> or principal+path:<param> for both)`,
		filepath.Join(dir, "paths", "b.yaml") + `:5: POST /b (createB): x-idempotency.scope: "nobody" is not a scope; use principal, global, header:<Header-Name>, path:<param> or sender:<name> (principal+header:<Header-Name> or principal+path:<param> for both)`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// writeSpec writes a spec's files (by path) under dir.
func writeSpec(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
