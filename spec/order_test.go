package spec

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestOperationsInSpecOrder: operations come in the order the spec writes
// them: paths as the root document lists them (a path item in another
// file where its $ref stands), methods as each path item lists them.
func TestOperationsInSpecOrder(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"api.yaml": `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /zebras:
    post: {operationId: createZebra, responses: {"201": {description: ok}}}
  /birds/{id}:
    $ref: 'paths/bird.yaml'
  /apes:
    put: {operationId: putApes, responses: {"200": {description: ok}}}
    post: {operationId: createApe, responses: {"201": {description: ok}}}
    delete: {operationId: deleteApes, responses: {"204": {description: ok}}}
  /apes/{id}:
    get: {operationId: getApe, parameters: [{name: id, in: path, required: true, schema: {type: string}}], responses: {"200": {description: ok}}}
`,
		"paths/bird.yaml": `parameters: [{name: id, in: path, required: true, schema: {type: string}}]
patch: {operationId: patchBird, responses: {"200": {description: ok}}}
get: {operationId: getBird, responses: {"200": {description: ok}}}
`,
	}
	writeSpec(t, dir, files)
	doc, err := Load(filepath.Join(dir, "api.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, op := range doc.Operations {
		got = append(got, op.OperationID)
	}
	want := []string{"createZebra", "patchBird", "getBird", "putApes", "createApe", "deleteApes", "getApe"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
