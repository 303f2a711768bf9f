package spec

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// relational names the parser's refusals that relate one field to another
// (or to the rest of the list), which JSON Schema cannot say: they are
// documented in the schema's descriptions and in docs/extension.md.
var relational = []string{
	"must be longer than lease",        // retention > lease
	"repeats the name of",              // unique phase names
	"the last phase cannot be foreign", // the last phase commits the response
}

func compiledSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(JSONSchema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("x-idempotency.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("x-idempotency.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// TestSchemaAsStrictAsTheParser: the JSON Schema refuses every extension
// the parser refuses on its own (without the document), except for the
// relational rules above, and accepts every extension the parser accepts.
// The extensions are every x-idempotency of the golden cases, valid and
// invalid, and one per rule that a spec linter could let through.
func TestSchemaAsStrictAsTheParser(t *testing.T) {
	sch := compiledSchema(t)
	type ext struct {
		where string
		v     any
	}
	var exts []ext
	files, err := filepath.Glob("../golden/*/api.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden cases (%v)", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Paths map[string]map[string]any `yaml:"paths"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for path, ops := range doc.Paths {
			for method, v := range ops {
				op, _ := v.(map[string]any) // not "parameters", a list
				if v, ok := op["x-idempotency"]; ok {
					exts = append(exts, ext{f + ": " + method + " " + path, jsonValue(v)})
				}
			}
		}
	}
	for _, v := range []any{
		map[string]any{"key": map[string]any{"pointer": "/id", "required": false}},
		map[string]any{"replay": map[string]any{"headers": []any{"content-length"}}},
		map[string]any{"replay": map[string]any{"headers": []any{"Authorization"}}},
		map[string]any{"retention": "1d2h"},
		map[string]any{"lease": "30"},
		map[string]any{"group": "1shared"},
		map[string]any{"scope": "sender:9net"},
		map[string]any{"retention": "7d", "lease": "1h30m"},
	} {
		exts = append(exts, ext{"rule", v})
	}
	for _, e := range exts {
		_, errs := Parse(e.v)
		schemaErr := sch.Validate(e.v)
		if len(errs) == 0 {
			if schemaErr != nil {
				t.Errorf("%s: %v: the parser accepts it, the schema refuses it: %v", e.where, e.v, schemaErr)
			}
			continue
		}
		if schemaErr == nil && !allRelational(errs) {
			t.Errorf("%s: %v: the parser refuses it (%s), the schema accepts it", e.where, e.v, errs[0].Message)
		}
	}
}

func allRelational(errs []FieldError) bool {
	for _, e := range errs {
		found := false
		for _, r := range relational {
			found = found || strings.Contains(e.Message, r)
		}
		if !found {
			return false
		}
	}
	return true
}

// jsonValue turns what YAML decoded into what JSON would (maps with string
// keys, float64 numbers), as the parser and the schema both take it.
func jsonValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := map[string]any{}
		for k, x := range t {
			m[k] = jsonValue(x)
		}
		return m
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = jsonValue(x)
		}
		return out
	case int:
		return float64(t)
	}
	return v
}
