package spec

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseDefaults(t *testing.T) {
	x, errs := Parse(true)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if diff := cmp.Diff(Default(), x); diff != "" {
		t.Fatal(diff)
	}
	if x, errs := Parse(false); x != nil || errs != nil {
		t.Fatalf("false = %v, %v; want nothing", x, errs)
	}
	// An object overrides only what it names.
	x, errs = Parse(map[string]any{"lease": "1m", "retention": "7d", "phases": []any{"a", map[string]any{"name": "b", "foreign": true}, "c"}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if x.Lease != time.Minute || x.Retention != 7*24*time.Hour || x.Key.Header != DefaultHeader || !x.Key.Required ||
		len(x.Phases) != 3 || !x.Phases[1].Foreign || x.Scope.Kind != "principal" {
		t.Fatalf("got %+v", x)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		in   any
		want []string // field: message fragments, in order
	}{
		{"yes", []string{"x-idempotency: got a string; want true, false or an object"}},
		{map[string]any{"colour": 1}, []string{"x-idempotency.colour: unknown field"}},
		{map[string]any{"lease": 30.0}, []string{`x-idempotency.lease: got 30; want a duration string`}},
		{map[string]any{"lease": "500ms"}, []string{"x-idempotency.lease: 500ms is shorter than 1s"}},
		{map[string]any{"retention": "30s"}, []string{"x-idempotency.retention: 30s must be longer than lease 30s"}},
		{map[string]any{"scope": "header:"}, []string{`x-idempotency.scope: "header:" is not a scope`}},
		{map[string]any{"key": map[string]any{"maxLength": 1.5}}, []string{"x-idempotency.key.maxLength: got 1.5; want a whole number"}},
		{map[string]any{"phases": []any{}}, []string{"x-idempotency.phases: got a list; want a non-empty list"}},
		{map[string]any{"phases": []any{map[string]any{"foreign": true}}}, []string{"x-idempotency.phases[0].name: missing"}},
		{map[string]any{"phases": []any{"a", map[string]any{"name": "b", "foreign": true}}}, []string{"x-idempotency.phases[1].foreign: the last phase cannot be foreign"}},
		{map[string]any{"phases": []any{"a", "a"}}, []string{`x-idempotency.phases[1].name: "a" repeats`}},
		{map[string]any{"fingerprint": map[string]any{"exclude": []any{"x", 3.0}}}, []string{
			"x-idempotency.fingerprint.exclude[1]: got a number; want a string"}},
		{map[string]any{"replay": map[string]any{"headers": []any{"Authorization"}}}, []string{"x-idempotency.replay.headers[0]: Authorization is never stored"}},
		{map[string]any{"replay": map[string]any{"headers": []any{"Content-Length", "transfer-encoding", "Content-Encoding"}}}, []string{
			"x-idempotency.replay.headers[0]: Content-Length is never stored: it frames the body",
			"x-idempotency.replay.headers[1]: transfer-encoding is never stored",
			"x-idempotency.replay.headers[2]: Content-Encoding is never stored"}},
		{map[string]any{"ambiguous": "maybe", "complete": "later"}, []string{`x-idempotency.ambiguous: "maybe" is not allowed`, `x-idempotency.complete: "later" is not allowed`}},
	}
	for _, tc := range cases {
		_, errs := Parse(tc.in)
		var got []string
		for _, e := range errs {
			got = append(got, e.Field+": "+e.Message)
		}
		if len(got) != len(tc.want) {
			t.Errorf("Parse(%v): got %d errors %q; want %d", tc.in, len(got), got, len(tc.want))
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], tc.want[i]) {
				t.Errorf("Parse(%v): error %d = %q; want prefix %q", tc.in, i, got[i], tc.want[i])
			}
		}
	}
}

// FuzzParse: no input makes Parse panic, and a successful parse is valid.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"lease":"30s","phases":["a",{"name":"b","foreign":true},"c"]}`))
	f.Add([]byte(`true`))
	f.Add([]byte(`{"key":{"maxLength":1e300},"scope":"header:X"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if json.Unmarshal(data, &v) != nil {
			return
		}
		x, errs := Parse(v)
		if len(errs) == 0 && x != nil && (x.Retention <= x.Lease || len(x.Phases) == 0 || x.Phases[len(x.Phases)-1].Foreign) {
			t.Fatalf("accepted an invalid extension %+v", x)
		}
	})
}

// TestSchemaMatchesParser: the JSON Schema documents exactly the fields the
// parser accepts.
func TestSchemaMatchesParser(t *testing.T) {
	var s struct {
		OneOf []struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"oneOf"`
	}
	if err := json.Unmarshal(JSONSchema, &s); err != nil {
		t.Fatal(err)
	}
	var fields []string
	for k := range s.OneOf[1].Properties {
		fields = append(fields, k)
	}
	sort.Strings(fields)
	_, errs := Parse(map[string]any{"bogus": true})
	allowed := strings.Split(strings.TrimPrefix(errs[0].Message, "unknown field; allowed fields are "), ", ")
	sort.Strings(allowed)
	if diff := cmp.Diff(allowed, fields); diff != "" {
		t.Fatalf("schema and parser disagree (-parser +schema):\n%s", diff)
	}
}

func TestLint(t *testing.T) {
	doc, err := LoadData("lint.yaml", []byte(`
openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /a:
    post: {operationId: a, responses: {"200": {description: ok}}}
    put: {operationId: putA, responses: {"200": {description: ok}}}
    patch: {operationId: patchA, x-idempotency: true, responses: {"200": {description: ok}}}
    delete:
      operationId: delA
      parameters: [{name: If-Match, in: header, schema: {type: string}}]
      responses: {"200": {description: ok}}
    get: {operationId: getA, responses: {"200": {description: ok}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range Lint(doc) {
		got = append(got, w.Method+" "+w.OperationID)
	}
	if diff := cmp.Diff([]string{"POST a", "PUT putA"}, got); diff != "" {
		t.Fatal(diff)
	}
}

func TestLoadNeverPanics(t *testing.T) {
	for _, doc := range []string{"", "{", "openapi: 3.0.3", "openapi: 3.0.3\npaths: {/a: {post: {x-idempotency: [1]}}}", "null", "[]"} {
		_, _ = LoadData("x.yaml", []byte(doc))
	}
}
