package gen

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestRenderedFieldOrder checks that every struct literal of a runtime type
// that the generator writes (renderSpecs spells its fields out by hand)
// names fields the type has, in the order the type declares them: a
// field renamed, removed or moved in the runtime shows up here, not as a
// compile error in a user's generated code.
func TestRenderedFieldOrder(t *testing.T) {
	types := map[string]reflect.Type{
		"idemecho.Spec":    reflect.TypeFor[idemecho.Spec](),
		"idem.Operation":   reflect.TypeFor[idem.Operation](),
		"idem.Policy":      reflect.TypeFor[idem.Policy](),
		"idemhttp.KeyRule": reflect.TypeFor[idemhttp.KeyRule](),
		"idemtype.Scope":   reflect.TypeFor[idemtype.Scope](),
	}
	seen := map[string]bool{}
	files, err := filepath.Glob(filepath.Join(goldenDir, "*", "out", GlueFile))
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated %s under %s: %v", GlueFile, goldenDir, err)
	}
	for _, file := range files {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			sel, ok := lit.Type.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			name := x.Name + "." + sel.Sel.Name
			typ, ok := types[name]
			if !ok {
				return true
			}
			seen[name] = true
			last := -1
			for _, el := range lit.Elts {
				key := el.(*ast.KeyValueExpr).Key.(*ast.Ident).Name
				field, ok := typ.FieldByName(key)
				switch {
				case !ok:
					t.Errorf("%s: %s has no field %s", file, name, key)
				case field.Index[0] <= last:
					t.Errorf("%s: %s.%s is written after a field the type declares later", file, name, key)
				default:
					last = field.Index[0]
				}
			}
			return true
		})
	}
	for name := range types {
		if !seen[name] {
			t.Errorf("no generated file writes a %s literal", name)
		}
	}
}

// TestVocabNames checks that each name vocab writes is the idemtype
// constant of that type and value, as idemtype's source declares it.
func TestVocabNames(t *testing.T) {
	consts := map[string][2]string{} // name -> type, value
	files, err := filepath.Glob("../runtime/idemtype/*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				v := s.(*ast.ValueSpec)
				typ, ok := v.Type.(*ast.Ident)
				if !ok || len(v.Values) != 1 {
					continue
				}
				if lit, ok := v.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					consts[v.Names[0].Name] = [2]string{typ.Name, lit.Value[1 : len(lit.Value)-1]}
				}
			}
		}
	}
	for v, name := range vocabNames {
		want := [2]string{reflect.TypeOf(v).Name(), reflect.ValueOf(v).String()}
		if got, ok := consts[name]; !ok || got != want {
			t.Errorf("vocabNames[%T %v] = %s, which idemtype declares as %v (want %v)", v, v, name, got, want)
		}
	}
}
