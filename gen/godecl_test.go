package gen

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
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

var
AfterVar, AfterVar2 int

const Before = 1 /* a comment over lines
acts as a newline */ const AfterComment = '{' + '}'

var Braces = "}\"{" + ` + "`}\nfunc Fake5() {}\n`" + `

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
	if _, err := parser.ParseFile(token.NewFileSet(), "api.gen.go", src, 0); err != nil {
		t.Fatalf("the test's source is not Go: %v", err)
	}
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
	want := []string{"A", "AfterComment", "AfterVar", "AfterVar2", "Alias", "B", "Before", "Braces", "C", "CreatePetResponseObject", "D", "Generic", "Grouped", "Kind",
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

// TestReadDeclsAgreesWithParser reads real Go files both ways, readDecls
// and a full parse, and compares the names declared and the interfaces
// kept: the generator's output (golden cases), this module, and a part of
// the standard library.
func TestReadDeclsAgreesWithParser(t *testing.T) {
	var files []string
	for _, root := range []string{"..", filepath.Join(build.Default.GOROOT, "src", "net", "http"), filepath.Join(build.Default.GOROOT, "src", "go")} {
		filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.Contains(path, "testdata") {
				files = append(files, path)
			}
			return nil
		})
	}
	if len(files) < 300 {
		t.Fatalf("only %d files to read", len(files))
	}
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		full, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			continue // not Go this toolchain parses
		}
		wantNames, wantIfaces := map[string]bool{}, map[string]string{}
		for _, d := range full.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						wantNames[s.Name.Name] = true
						if it, ok := s.Type.(*ast.InterfaceType); ok && s.TypeParams == nil {
							wantIfaces[s.Name.Name] = methodSummary(it)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							wantNames[n.Name] = true
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil {
					wantNames[d.Name.Name] = true
				}
			}
		}
		got, err := readDecls(filepath.Base(path), src, func(string) bool { return true })
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if diff := cmp.Diff(wantNames, got.declared); diff != "" {
			t.Errorf("%s: declared names (-parser +readDecls):\n%s", path, diff)
		}
		gotIfaces := map[string]string{}
		for _, d := range got.file.Decls {
			for _, s := range d.(*ast.GenDecl).Specs {
				if s, ok := s.(*ast.TypeSpec); ok {
					gotIfaces[s.Name.Name] = methodSummary(s.Type.(*ast.InterfaceType))
				}
			}
		}
		if diff := cmp.Diff(wantIfaces, gotIfaces); diff != "" {
			t.Errorf("%s: interfaces (-parser +readDecls):\n%s", path, diff)
		}
		var wantImports, gotImports []string
		for _, imp := range full.Imports {
			wantImports = append(wantImports, imp.Path.Value)
		}
		for _, imp := range got.file.Imports {
			gotImports = append(gotImports, imp.Path.Value)
		}
		if diff := cmp.Diff(wantImports, gotImports); diff != "" {
			t.Errorf("%s: imports (-parser +readDecls):\n%s", path, diff)
		}
	}
}

// methodSummary lists an interface's methods and embedded types with their
// doc comments.
func methodSummary(it *ast.InterfaceType) string {
	var b strings.Builder
	for _, m := range it.Methods.List {
		for _, n := range m.Names {
			b.WriteString(n.Name + " ")
		}
		if m.Doc != nil {
			b.WriteString(m.Doc.Text())
		}
		b.WriteString(";")
	}
	return b.String()
}
