package gen

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
)

// checkOapiOutput type-checks the file oapi-codegen wrote (name, src) on
// its own, without loading its imports, for the errors that are the
// package's own: a name declared twice, a type defined by itself, a name
// of the package used but never declared. They come
// from the spec's names (an enum value whose prefixed constant is a
// schema's type name, a schema that is an alias of itself), the user
// learns of them from go build pointing into a file that says "Code
// generated", and the fix is in the spec: a name of its own for one of
// them (x-go-type-name, in an overlay). It returns nil when there are none.
func checkOapiOutput(name string, src []byte, doc *openapi3.T, alone bool) error {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
	if err != nil {
		return fmt.Errorf("gen: oapi-codegen's output does not parse: %w", err)
	}
	var found []types.Error
	conf := types.Config{
		// Imports resolve to empty packages: what they would define is
		// not this check's business, and loading them would cost more than
		// generating.
		Importer: emptyImporter{},
		Error: func(err error) {
			var te types.Error
			if errors.As(err, &te) && ownError(te.Msg, alone) {
				found = append(found, te)
			}
		},
	}
	conf.Check(f.Name.Name, fset, []*ast.File{f}, nil)
	if len(found) == 0 {
		return nil
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].Pos < found[j].Pos })
	var b strings.Builder
	fmt.Fprintf(&b, "oapi-codegen's output for this spec does not compile, because of names the spec gives (oapi-codegen's declarations, not idemgen's), in %s:", name)
	var renames []rename
	for _, te := range found {
		pos := fset.Position(te.Pos)
		what := declaredFor(f, fset, te.Pos)
		fmt.Fprintf(&b, "\n  %s:%d: %s%s", name, pos.Line, strings.TrimSpace(te.Msg), what)
		// An enum's constants, prefixed with its type's name, collide:
		// the enum's property is what to rename.
		if m := enumValues.FindStringSubmatch(what); m != nil {
			if r, ok := enumTarget(f, m[1], doc); ok && !slices.Contains(renames, r) {
				renames = append(renames, r)
			}
		}
	}
	for _, te := range found {
		if strings.HasPrefix(te.Msg, "undefined: ") {
			b.WriteString("\nA name used but never declared is a type oapi-codegen refers to and did not write (an enum of a property beside allOf, under compatibility old-merge-schemas, is one such): make that property's schema simpler in an overlay.")
			break
		}
	}
	b.WriteString("\nGive the enum (or the schema) a Go name of its own with x-go-type-name, in an overlay (output-options.overlay.path in the config), so that the spec stays as published. On an enum's property the new name also prefixes its constants; on a schema the type is renamed but keeps an alias of its old name, which still collides")
	if len(renames) > 0 {
		b.WriteString(". For these:\n  overlay: 1.0.0\n  info: {title: go names, version: \"1\"}\n  actions:")
		for _, r := range renames {
			fmt.Fprintf(&b, "\n    - target: %s\n      update: {x-go-type-name: %s}", r.target, r.name)
		}
	}
	b.WriteString("\n(docs/troubleshooting.md lists the collisions oapi-codegen is known for.)")
	return errors.New(b.String())
}

// enumValues reads the enum type a constant block's comment names
// ("Defines values for SourceType").
var enumValues = regexp.MustCompile(`Defines values for (\w+)`)

// rename is an overlay action that gives an enum property a Go name.
type rename struct{ target, name string }

// enumTarget is the overlay action that renames the property whose enum
// oapi-codegen named typeName: its target
// ("$.components.schemas.source.properties.type"), found from the type's
// comment ("SourceType defines model for Source.Type") and the spec's
// component schemas by their Go names (oapi-codegen's own naming, as the
// run just made it), and a new name after its schema's (SourceKind).
func enumTarget(f *ast.File, typeName string, doc *openapi3.T) (rename, bool) {
	if doc == nil || doc.Components == nil {
		return rename{}, false
	}
	var path string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE {
			continue
		}
		for _, s := range g.Specs {
			if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.Name == typeName && g.Doc != nil {
				if m := modelFor.FindStringSubmatch(g.Doc.Text()); m != nil {
					path = m[1]
				}
			}
		}
	}
	schemaName, prop, ok := strings.Cut(path, ".")
	if !ok {
		return rename{}, false
	}
	for name, ref := range doc.Components.Schemas {
		typeName := codegen.SchemaNameToTypeName(name)
		if typeName != schemaName || ref == nil || ref.Value == nil {
			continue
		}
		for p := range ref.Value.Properties {
			if codegen.ToCamelCase(p) == prop {
				return rename{target: "$.components.schemas." + name + ".properties." + p, name: typeName + "Kind"}, true
			}
		}
	}
	return rename{}, false
}

// ownError reports whether a type checker's message is about the package's
// own declarations rather than about what its imports would provide.
// alone: the file is the whole package (no part of the spec is generated
// into another file of it, as an import mapping to "-" does).
func ownError(msg string, alone bool) bool {
	// "undefined: echo.Context" is an import's name, which the check does
	// not load; "undefined: SourceKind" is the package's own.
	if name, ok := strings.CutPrefix(msg, "undefined: "); ok {
		return alone && !strings.Contains(name, ".")
	}
	return strings.Contains(msg, "redeclared") || strings.HasPrefix(strings.TrimSpace(msg), "other declaration of") ||
		strings.Contains(msg, "invalid recursive type") || strings.Contains(msg, "invalid use of type alias")
}

// modelFor reads the schema a declaration's comment names ("defines model
// for source_type_ach_credit_transfer").
var modelFor = regexp.MustCompile(`defines model for ([A-Za-z0-9_.-]*[A-Za-z0-9_-])`)

// declaredFor returns, for an error at pos, what oapi-codegen's comment on
// the declaration there says it is for: " (SourceTypeAchCreditTransfer
// defines model for source_type_ach_credit_transfer)", or "".
func declaredFor(f *ast.File, fset *token.FileSet, pos token.Pos) string {
	line := fset.Position(pos).Line
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || fset.Position(g.Pos()).Line > line || fset.Position(g.End()).Line < line {
			continue
		}
		for _, s := range g.Specs {
			if fset.Position(s.Pos()).Line != line {
				continue
			}
			var doc *ast.CommentGroup
			switch s := s.(type) {
			case *ast.TypeSpec:
				doc = s.Doc
			case *ast.ValueSpec:
				doc = s.Doc
			}
			if doc == nil {
				doc = g.Doc
			}
			if doc != nil {
				return " (" + strings.TrimSuffix(strings.TrimSpace(strings.SplitN(doc.Text(), "\n", 2)[0]), ".") + ")"
			}
		}
	}
	return ""
}

// emptyImporter imports every path as an empty, complete package.
type emptyImporter struct{}

func (emptyImporter) Import(path string) (*types.Package, error) {
	name := path[strings.LastIndex(path, "/")+1:]
	if i := strings.IndexAny(name, ".-"); i > 0 {
		name = name[:i]
	}
	if strings.HasPrefix(name, "v") && len(name) <= 3 { // github.com/labstack/echo/v4
		name = strings.TrimSuffix(path, "/"+name)
		name = name[strings.LastIndex(name, "/")+1:]
	}
	p := types.NewPackage(path, name)
	p.MarkComplete()
	return p, nil
}
