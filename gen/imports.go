package gen

import (
	"bytes"
	"fmt"
	"go/parser"
	"go/token"
	"strings"

	"github.com/dave/jennifer/jen"
)

// modulePath is the toolkit's module: the runtime packages generated code
// imports.
const modulePath = "github.com/idemgen/idemgen"

// render renders a jennifer file with its imports in groups, as goimports
// with -local github.com/idemgen/idemgen writes them and as a reader
// expects: the standard library, then other modules, then idemgen's
// runtime. jennifer writes one sorted block.
func render(f *jen.File, name string) ([]byte, error) {
	var buf bytes.Buffer
	if err := f.Render(&buf); err != nil {
		return nil, fmt.Errorf("gen: rendering %s: %w", name, err)
	}
	return groupImports(buf.Bytes())
}

// groupImports rewrites the parenthesised import declaration of src (gofmt
// output) into groups separated by blank lines, each sorted.
func groupImports(src []byte) ([]byte, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "", src, parser.ImportsOnly)
	if err != nil {
		return nil, fmt.Errorf("gen: grouping imports: %w", err)
	}
	switch {
	case len(file.Imports) < 2:
		return src, nil
	case len(file.Decls) != 1: // ImportsOnly: the import declarations
		return nil, fmt.Errorf("gen: grouping imports: %d import declarations; want one", len(file.Decls))
	}
	decl := file.Decls[0]
	var groups [3][]string
	for _, imp := range file.Imports {
		path := strings.Trim(imp.Path.Value, `"`)
		g := 1
		switch {
		case !strings.Contains(strings.Split(path, "/")[0], "."):
			g = 0
		case path == modulePath || strings.HasPrefix(path, modulePath+"/"):
			g = 2
		}
		text := src[fset.Position(imp.Pos()).Offset:fset.Position(imp.End()).Offset]
		groups[g] = append(groups[g], string(text))
	}
	var b strings.Builder
	b.WriteString("import (\n")
	first := true
	for _, g := range groups {
		if len(g) == 0 {
			continue
		}
		if !first {
			b.WriteByte('\n')
		}
		first = false
		for _, line := range g {
			b.WriteString("\t" + line + "\n")
		}
	}
	b.WriteString(")")
	start, end := fset.Position(decl.Pos()).Offset, fset.Position(decl.End()).Offset
	out := make([]byte, 0, len(src)+8)
	out = append(out, src[:start]...)
	out = append(out, b.String()...)
	return append(out, src[end:]...), nil
}
