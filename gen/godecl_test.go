package gen

import (
	"go/ast"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadDecls(t *testing.T) {
	src := "// Code generated. DO NOT EDIT.\npackage api\n\n" + `import (
	"context"
	strictecho "github.com/oapi-codegen/runtime/strictmiddleware/echo"
)

import "fmt"

// A comment that says type Fake interface { Nope() } is not a declaration.
const Single = 1

const (
	A Kind = "a"
	B, C    = 2, 3
	D
)

var (
	_ StrictServerInterface = nil
	x, y    = fmt.Sprint("type Fake2 interface{}"), ` + "`\ntype Fake3 interface{}\nfunc Fake4() {}\n`" + `
)

type Kind string

type (
	Grouped struct{ F func() }
	Alias   = Kind
)

// StrictServerInterface represents all server handlers.
type StrictServerInterface interface {
	// Create a pet
	// (POST /pets)
	CreatePet(ctx context.Context, request CreatePetRequestObject) (CreatePetResponseObject, error)
}

type CreatePetResponseObject interface {
	VisitCreatePetResponse(w http.ResponseWriter) error
}

type Other interface{ M() }

func (s *server) Method() { type Inner interface{}; var local = 1; _ = local }

func Generic[T any](v T) (func(), error) { return func() {}, nil }

func NewStrictHandler(ssi StrictServerInterface, middlewares []strictecho.StrictEchoMiddlewareFunc) ServerInterface {
	return &strictHandler{ssi: ssi}
}
`
	d, err := readDecls("api.gen.go", []byte(src), func(name string) bool {
		return name == "StrictServerInterface" || strings.HasSuffix(name, "ResponseObject")
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range d.declared {
		names = append(names, n)
	}
	sort.Strings(names)
	want := []string{"A", "Alias", "B", "C", "CreatePetResponseObject", "D", "Generic", "Grouped", "Kind",
		"NewStrictHandler", "Other", "Single", "StrictServerInterface", "_", "x", "y"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("declared (-want +got):\n%s", diff)
	}
	var imports []string
	for _, imp := range d.file.Imports {
		imports = append(imports, imp.Path.Value)
	}
	if diff := cmp.Diff([]string{`"context"`, `"github.com/oapi-codegen/runtime/strictmiddleware/echo"`, `"fmt"`}, imports); diff != "" {
		t.Errorf("imports (-want +got):\n%s", diff)
	}
	var kept []string
	for _, decl := range d.file.Decls {
		if g, ok := decl.(*ast.GenDecl); ok {
			for _, s := range g.Specs {
				if s, ok := s.(*ast.TypeSpec); ok {
					kept = append(kept, s.Name.Name)
					if s.Name.Name == "StrictServerInterface" {
						m := s.Type.(*ast.InterfaceType).Methods.List[0]
						if m.Doc == nil || m.Doc.Text() != "Create a pet\n(POST /pets)\n" {
							t.Errorf("the method's doc comment was not kept: %v", m.Doc)
						}
					}
				}
			}
		}
	}
	if diff := cmp.Diff([]string{"StrictServerInterface", "CreatePetResponseObject"}, kept); diff != "" {
		t.Errorf("kept types (-want +got):\n%s", diff)
	}
}

func TestReadDeclsBadSource(t *testing.T) {
	if _, err := readDecls("api.gen.go", []byte("package api\n\nvar s = \"unterminated\n"), func(string) bool { return true }); err == nil {
		t.Error("an unterminated string was not reported")
	}
}
