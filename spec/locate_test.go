package spec

import (
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestErrorLines: an error points at the node of its field, as deep as the
// document has it: a list item at its own line, and never at text further
// down the operation that merely looks like the field.
func TestErrorLines(t *testing.T) {
	cases := []struct {
		name, doc string
		want      []string // "line field" of each error
	}{{
		name: "flow list, then a parameter with a name",
		doc: `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /a/{id}:
    post:
      operationId: a
      x-idempotency: {phases: [one, one]}
      parameters:
        - name: id
          in: path
          required: true
          schema: {type: string}
      responses: {"200": {description: ok}}
`,
		want: []string{"7 x-idempotency.phases[1].name"},
	}, {
		name: "block list items",
		doc: `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /a:
    post:
      operationId: a
      x-idempotency:
        phases:
          - one
          - one
          - {name: charge, foreign: true}
      responses: {"200": {description: ok}}
`,
		want: []string{"10 x-idempotency.phases[1].name", "11 x-idempotency.phases[2].foreign"},
	}, {
		name: "a field named like one of the extension, in the description after it",
		doc: `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /a:
    post:
      operationId: a
      x-idempotency:
        replay: {maxBodyBytes: 0}
      description: |
        replay:
          maxBodyBytes: is documented here
      responses: {"200": {description: ok}}
`,
		want: []string{"8 x-idempotency.replay.maxBodyBytes"},
	}, {
		name: "JSON",
		doc: `{"openapi": "3.0.3", "info": {"title": "t", "version": "1"},
 "paths": {"/a": {"post": {
   "operationId": "a",
   "x-idempotency": {
     "scope": "tenant",
     "fingerprint": {"exclude": ["/x",
                                 "y"]}},
   "responses": {"200": {"description": "ok"}}}}}}
`,
		want: []string{"5 x-idempotency.scope", "6 x-idempotency.fingerprint.exclude[0]", "7 x-idempotency.fingerprint.exclude[1]"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadData("api.yaml", []byte(tc.doc))
			es, ok := err.(Errors)
			if !ok {
				t.Fatalf("LoadData: %v", err)
			}
			var got []string
			for _, e := range es {
				got = append(got, strconv.Itoa(e.Line)+" "+e.Field)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s\n%v", diff, err)
			}
		})
	}
}
