package spec

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/runtime/idemtype"
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
	if x.Lease != time.Minute || x.Retention != 7*24*time.Hour || x.Key.Header != idemtype.DefaultKeyHeader || !x.Key.Required ||
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
		{map[string]any{"lease": "25d", "retention": "60d"}, []string{"x-idempotency.lease: 600h0m0s is longer than 576h0m0s"}},
		{map[string]any{"retention": "5s"}, []string{"x-idempotency.retention: 5s must be longer than lease 5s"}},
		{map[string]any{"key": map[string]any{"maxLength": 36.0, "minLength": 40.0}}, []string{"x-idempotency.key.minLength: 40 exceeds key.maxLength 36: no key could be sent"}},
		{map[string]any{"scope": "header:"}, []string{`x-idempotency.scope: "header:" is not a scope`}},
		{map[string]any{"scope": "sender:"}, []string{`x-idempotency.scope: "sender:" is not a scope; use principal, global, header:<Header-Name>, path:<param> or sender:<name> (principal+header:<Header-Name> or principal+path:<param> for both)`}},
		{map[string]any{"key": map[string]any{"pointer": "id"}}, []string{`x-idempotency.key.pointer: "id" is not a JSON Pointer`}},
		{map[string]any{"placement": "header:Authorization"}, []string{`x-idempotency.placement: "header:Authorization" reads a credential: a record keeps its placement in clear`}},
		{map[string]any{"placement": "header:x-api-key"}, []string{`x-idempotency.placement: "header:x-api-key" reads a credential`}},
		{map[string]any{"placement": "body:account"}, []string{`x-idempotency.placement: "body:account": "account" is not a JSON Pointer into the body`}},
		{map[string]any{"placement": "tenant"}, []string{`x-idempotency.placement: "tenant" is not a placement; use principal, header:<Header-Name>, path:<param> or body:<JSON Pointer>`}},
		{map[string]any{"key": map[string]any{"pointer": "/id", "header": "X-Key"}}, []string{"x-idempotency.key.pointer: key.header and key.pointer exclude each other"}},
		{map[string]any{"key": map[string]any{"pointer": "/id", "required": false}}, []string{"x-idempotency.key.required: a key in the body is always required"}},
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
	f.Add([]byte(`{"key":{"pointer":"/id","required":true},"scope":"sender:cardnet"}`))
	f.Add([]byte(`{"key":{"maxLength":1e300},"scope":"header:X"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if json.Unmarshal(data, &v) != nil {
			return
		}
		x, errs := Parse(v)
		if len(errs) == 0 && x != nil && (x.Retention <= x.Lease || len(x.Phases) == 0 || x.Phases[len(x.Phases)-1].Foreign ||
			(x.Key.Pointer != "" && (!x.Key.Required || x.Key.Header != "")) || (x.Key.Pointer == "" && x.Key.Header == "")) {
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

func TestParseBodyKeyAndSender(t *testing.T) {
	x, errs := Parse(map[string]any{"key": map[string]any{"pointer": "/id", "maxLength": 64.0}, "scope": "sender:cardnet"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := Key{Pointer: "/id", Required: true, MaxLength: 64, Format: "any"}
	if diff := cmp.Diff(want, x.Key); diff != "" {
		t.Fatalf("key (-want +got):\n%s", diff)
	}
	if x.Scope != (Scope{Kind: idemtype.ScopeSender, Name: "cardnet"}) || x.Scope.String() != "sender:cardnet" || x.Key.Source() != "pointer /id" {
		t.Fatalf("scope %+v (%s), key source %s", x.Scope, x.Scope, x.Key.Source())
	}
}

// TestKeyPointerAgainstSchema: a body key must name a member that every
// valid body has (each member on the way required), holding a string or an
// integer; anything else is an error that names the problem.
func TestKeyPointerAgainstSchema(t *testing.T) {
	const event = `{type: object, required: [id, data, items], properties: {
  id: {type: string}, seq: {type: integer}, amount: {type: number}, note: {type: string}, ok: {type: boolean},
  maybe: {type: string, nullable: true}, untyped: {},
  data: {type: object, required: [object], properties: {object: {type: object, required: [id], properties: {id: {type: integer}, tag: {type: string}}}}},
  items: {type: array, items: {type: object, required: [id], properties: {id: {type: string}}}}}}`
	cases := []struct {
		pointer, body, schema string
		want                  string // "" for valid; else a fragment of the error
	}{
		{"/id", "required: true", event, ""},
		{"/data/object/id", "required: true", event, ""},
		{"/note", "required: true", event, `"/note" names an optional member: "note" is not in the required list of the body`},
		{"/data/object/tag", "required: true", event, `"tag" is not in the required list of /data/object`},
		{"/data", "required: true", event, `"/data" names an object; a key must be a string or an integer`},
		{"/nope", "required: true", event, `"/nope" does not resolve against the request body schema; top-level properties are amount, data`},
		{"/data/nope", "required: true", event, `the properties of /data are object`},
		{"/items/0/id", "required: true", event, `goes through the array`},
		{"/id", "", event, "the request body is optional"},
		{"/id", "required: true", `{type: object, required: [id], properties: {id: {type: number}}}`, "names a number"},
		{"/id", "required: true", `{type: object, required: [id], properties: {id: {type: boolean}}}`, "names a boolean"},
		{"/id", "required: true", `{type: object, required: [id], properties: {id: {type: string, nullable: true}}}`, "may be null"},
		{"/id", "required: true", `{type: object, required: [id], properties: {id: {}}}`, "without a type"},
		{"/id", "required: true", `{allOf: [{type: object, properties: {id: {type: string}}}, {required: [id]}]}`, ""},
		{"/id", "required: true", `{oneOf: [{type: object, required: [id], properties: {id: {type: string}}}, {type: object, required: [id], properties: {id: {type: integer}}}]}`, ""},
		{"/id", "required: true", `{oneOf: [{type: object, required: [id], properties: {id: {type: string}}}, {type: object, properties: {id: {type: string}}}]}`, "optional member"},
		{"/id", "required: true", `{type: object, additionalProperties: {type: string}}`, "does not resolve"},
	}
	for _, tc := range cases {
		doc := fmt.Sprintf(`openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /events:
    post:
      operationId: receive
      x-idempotency: {key: {pointer: %q}, scope: global}
      requestBody:
        %s
        content:
          application/json:
            schema: %s
      responses: {"200": {description: ok}}
`, tc.pointer, tc.body, strings.ReplaceAll(tc.schema, "\n", "\n              "))
		_, err := LoadData("api.yaml", []byte(doc))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s in %s: %v", tc.pointer, tc.schema, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s in %s: got %v; want an error containing %q", tc.pointer, tc.schema, err, tc.want)
		case tc.want != "" && !strings.HasPrefix(err.Error(), "api.yaml:7: POST /events (receive): x-idempotency.key.pointer: "):
			t.Errorf("%s: error %q does not point at the key's line", tc.pointer, err)
		}
	}
}

func TestKeyPointerNeedsJSONBody(t *testing.T) {
	for body, want := range map[string]string{
		"":                                  "no JSON request body",
		"application/x-www-form-urlencoded": "no JSON request body",
		"application/json, text/plain":      "also accepts text/plain",
	} {
		content := ""
		for _, mt := range strings.Split(body, ", ") {
			if mt != "" {
				content += fmt.Sprintf("\n          %s: {schema: {type: object, required: [id], properties: {id: {type: string}}}}", mt)
			}
		}
		rb := ""
		if content != "" {
			rb = "\n      requestBody:\n        required: true\n        content:" + content
		}
		doc := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /events:
    post:
      operationId: receive
      x-idempotency: {key: {pointer: /id}}` + rb + `
      responses: {"200": {description: ok}}
`
		_, err := LoadData("api.yaml", []byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("body %q: got %v; want %q", body, err, want)
		}
	}
}

func TestGroupsAgreeOnKeySource(t *testing.T) {
	doc := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /a:
    post:
      operationId: a
      x-idempotency: {group: g, scope: global}
      responses: {"200": {description: ok}}
  /b:
    post:
      operationId: b
      x-idempotency: {group: g, scope: global, key: {pointer: /id}}
      requestBody:
        required: true
        content: {application/json: {schema: {type: object, required: [id], properties: {id: {type: string}}}}}
      responses: {"200": {description: ok}}
`
	_, err := LoadData("api.yaml", []byte(doc))
	if err == nil || !strings.Contains(err.Error(), "header Idempotency-Key") || !strings.Contains(err.Error(), "pointer /id") {
		t.Fatalf("got %v", err)
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
  /search:
    get:
      operationId: search
      requestBody: {content: {application/json: {schema: {type: object}}}}
      responses: {"200": {description: ok}}
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range Lint(doc) {
		got = append(got, w.String())
	}
	// Each warning is located, as errors are: the operation's line.
	want := []string{
		"lint.yaml:6: POST /a (a): no x-idempotency: a client's retry after a timeout can apply this request twice",
		"lint.yaml:7: PUT /a (putA): neither x-idempotency nor a precondition header (If-Match, If-None-Match, If-Unmodified-Since): concurrent retries can overwrite each other's effects",
		`lint.yaml:15: GET /search (search): a request body on a GET has no meaning (RFC 9110), and proxies, caches and clients may drop it; a GET that needs one usually changes state: make it a POST (docs/testing.md, "A GET that changes state"), or move the body's values into query parameters`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatal(diff)
	}
}

func TestLoadNeverPanics(t *testing.T) {
	for _, doc := range []string{"", "{", "openapi: 3.0.3", "openapi: 3.0.3\npaths: {/a: {post: {x-idempotency: [1]}}}", "null", "[]"} {
		_, _ = LoadData("x.yaml", []byte(doc))
	}
}

// TestSchemaDefaultsMatchParser: an extension that spells out every default
// the JSON Schema documents is the policy `true` gives, so the schema's
// defaults cannot drift from idemtype's.
func TestSchemaDefaultsMatchParser(t *testing.T) {
	var s struct {
		OneOf []map[string]any `json:"oneOf"`
	}
	if err := json.Unmarshal(JSONSchema, &s); err != nil {
		t.Fatal(err)
	}
	var defaults func(schema map[string]any) map[string]any
	defaults = func(schema map[string]any) map[string]any {
		out := map[string]any{}
		props, _ := schema["properties"].(map[string]any)
		for name, p := range props {
			p := p.(map[string]any)
			if d, ok := p["default"]; ok {
				out[name] = d
			} else if _, ok := p["properties"]; ok {
				if sub := defaults(p); len(sub) > 0 {
					out[name] = sub
				}
			}
		}
		return out
	}
	spelled := defaults(s.OneOf[1])
	// Every default the parser fills in is documented.
	for _, f := range []string{"key", "scope", "retention", "lease", "replay", "ambiguous", "complete", "phases"} {
		if _, ok := spelled[f]; !ok {
			t.Errorf("the schema documents no default for %q", f)
		}
	}
	got, errs := Parse(spelled)
	if len(errs) > 0 {
		t.Fatalf("the schema's defaults %v do not parse: %v", spelled, errs)
	}
	want, _ := Parse(true)
	got.Key.FormatSet = false // spelled out, as no operation needs to
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("the schema's defaults %v are not the parser's (-parser +schema):\n%s", spelled, diff)
	}
}

// TestPathScopeNamesAParameter: path:<param> must name a parameter of the
// operation's path, located at the scope's line.
func TestPathScopeNamesAParameter(t *testing.T) {
	_, err := LoadData("scope.yaml", []byte(`openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /tenants/{tenant}/jobs:
    parameters: [{name: tenant, in: path, required: true, schema: {type: string}}]
    post:
      operationId: createJob
      x-idempotency:
        scope: path:tenant_id
      responses: {"201": {description: created}}
  /jobs:
    post:
      operationId: createLooseJob
      x-idempotency: {scope: principal+path:tenant}
      responses: {"201": {description: created}}
  /tenants/{tenant}/ok:
    parameters: [{name: tenant, in: path, required: true, schema: {type: string}}]
    post:
      operationId: fine
      x-idempotency: {scope: principal+path:tenant}
      responses: {"201": {description: created}}
`))
	want := "scope.yaml:9: POST /tenants/{tenant}/jobs (createJob): x-idempotency.scope: path:tenant_id names no parameter of the path /tenants/{tenant}/jobs; its parameters are tenant\n" +
		"scope.yaml:14: POST /jobs (createLooseJob): x-idempotency.scope: path:tenant names no parameter of the path /jobs, which has none; scope by a header, the principal or globally instead"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

// TestParsePlacement: each placement form reads back as written.
func TestParsePlacement(t *testing.T) {
	for _, s := range []string{"principal", "header:X-Tenant", "path:account", "body:/account/id"} {
		x, errs := Parse(map[string]any{"placement": s})
		if len(errs) != 0 || x.Placement.String() != s {
			t.Errorf("placement %q: %+v, %v", s, x.Placement, errs)
		}
	}
	if x, _ := Parse(map[string]any{}); !x.Placement.IsZero() {
		t.Errorf("no placement: %+v; want none", x.Placement)
	}
}
