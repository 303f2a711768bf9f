package gen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"strings"
)

// goDecls is what the generator reads of a file oapi-codegen wrote.
type goDecls struct {
	// declared holds every name the file declares at package level: types,
	// functions (not methods), variables and constants.
	declared map[string]bool
	// file is a parsed file holding only the original's imports and the
	// interface types asked for, doc comments included.
	file *ast.File
}

// readDecls reads src, a Go file named name, for its package-level names,
// its imports and the interface types whose names keep accepts.
//
// oapi-codegen's output is large (30,000 lines for a 1.4 MB spec) and the
// generator needs a small part of it, so it is tokenized, which costs a
// fraction of a full parse, and only the parts asked for are parsed. The
// tokens, not the text, delimit declarations: a string or comment that looks
// like one is never taken for one.
func readDecls(name string, src []byte, keep func(typeName string) bool) (*goDecls, error) {
	fset := token.NewFileSet()
	file := fset.AddFile(name, fset.Base(), len(src))
	r := &declReader{src: src, file: file, keep: keep, declared: map[string]bool{}}
	r.s.Init(file, src, func(pos token.Position, msg string) { r.errs.Add(pos, msg) }, 0)
	for r.next(); r.tok != token.EOF; r.next() {
		switch r.tok {
		case token.IMPORT:
			start := r.off
			r.skip()
			r.parts = append(r.parts, string(src[start:r.off]))
		case token.FUNC:
			if r.next() == token.IDENT {
				r.declared[r.lit] = true
			}
			r.skip()
		case token.TYPE, token.VAR, token.CONST:
			kw := r.tok
			if r.next() != token.LPAREN {
				r.spec(kw)
				continue
			}
			for r.next(); r.tok != token.RPAREN && r.tok != token.EOF; {
				if r.tok != token.SEMICOLON {
					r.spec(kw)
				}
				if r.tok == token.SEMICOLON {
					r.next()
				}
			}
		default:
			r.skip()
		}
	}
	if r.errs.Len() > 0 {
		return nil, fmt.Errorf("gen: reading oapi-codegen output: %w", r.errs.Err())
	}
	kept := "package p\n\n" + strings.Join(r.parts, "\n\n") + "\n"
	f, err := parser.ParseFile(token.NewFileSet(), name, kept, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("gen: parsing oapi-codegen output: %w", err)
	}
	return &goDecls{declared: r.declared, file: f}, nil
}

// declReader walks the tokens of a file one package-level declaration at a
// time.
type declReader struct {
	src      []byte
	file     *token.File
	s        scanner.Scanner
	errs     scanner.ErrorList
	keep     func(string) bool
	declared map[string]bool
	parts    []string // the source of each import declaration and kept type

	tok token.Token
	lit string
	off int // of tok in src
}

func (r *declReader) next() token.Token {
	pos, tok, lit := r.s.Scan()
	r.tok, r.lit, r.off = tok, lit, r.file.Offset(pos)
	return tok
}

// spec reads one type, var or const spec, starting at its first token, up to
// the semicolon that ends it or the parenthesis that closes its group.
func (r *declReader) spec(kw token.Token) {
	if r.tok != token.IDENT {
		r.skip()
		return
	}
	r.declared[r.lit] = true
	name, start := r.lit, r.off
	r.next()
	switch {
	case kw == token.TYPE && r.tok == token.INTERFACE && r.keep(name):
		r.skip()
		r.parts = append(r.parts, "type "+string(r.src[start:r.off]))
		return
	case kw != token.TYPE:
		for r.tok == token.COMMA {
			if r.next() == token.IDENT {
				r.declared[r.lit] = true
				r.next()
			}
		}
	}
	r.skip()
}

// skip advances from the current token to the end of the declaration or
// spec it is in: a semicolon outside brackets, the parenthesis that closes
// the enclosing group, or the end of the file.
func (r *declReader) skip() {
	depth := 0
	for ; r.tok != token.EOF; r.next() {
		switch r.tok {
		case token.LPAREN, token.LBRACE, token.LBRACK:
			depth++
		case token.RPAREN, token.RBRACE, token.RBRACK:
			if depth == 0 {
				return
			}
			depth--
		case token.SEMICOLON:
			if depth == 0 {
				return
			}
		}
	}
}
