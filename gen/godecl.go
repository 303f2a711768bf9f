package gen

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
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
// generator needs a small part of it. A full parse would cost a sixth of
// oapi-codegen's own run, so the file is tokenized by goLexer, which knows
// just enough of Go's lexical grammar for this (about a fifth of go/scanner's
// cost, which builds a string for every identifier and comment), and only
// the parts asked for are parsed. Tokens, not lines of text, delimit the
// declarations: a string or comment that looks like one is never taken for
// one.
func readDecls(name string, src []byte, keep func(typeName string) bool) (*goDecls, error) {
	r := &declReader{lex: goLexer{src: src}, keep: keep, declared: map[string]bool{}}
	for r.next(); r.tok != tokEOF; r.next() {
		switch {
		case r.is("import"):
			start := r.off
			r.skip()
			r.parts = append(r.parts, string(src[start:r.off]))
		case r.is("func"):
			if r.next() == tokIdent {
				r.declared[r.lit()] = true
			}
			r.skip()
		case r.is("type"), r.is("var"), r.is("const"):
			isType := r.is("type")
			if r.next() != tokLParen {
				r.spec(isType)
				continue
			}
			for r.next(); r.tok != tokRParen && r.tok != tokEOF; {
				if r.tok != tokSemicolon {
					r.spec(isType)
				}
				if r.tok == tokSemicolon {
					r.next()
				}
			}
		default:
			r.skip()
		}
	}
	if r.lex.err != nil {
		return nil, fmt.Errorf("gen: reading oapi-codegen output: %s: %w", name, r.lex.err)
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
	lex      goLexer
	keep     func(string) bool
	declared map[string]bool
	parts    []string // the source of each import declaration and kept type

	tok      tokKind
	off, end int // tok is src[off:end]
}

func (r *declReader) next() tokKind {
	r.tok, r.off, r.end = r.lex.next()
	return r.tok
}

func (r *declReader) lit() string { return string(r.lex.src[r.off:r.end]) }

// is reports whether the current token is the keyword kw.
func (r *declReader) is(kw string) bool {
	return r.tok == tokIdent && string(r.lex.src[r.off:r.end]) == kw
}

// spec reads one type, var or const spec, starting at its first token, up to
// the semicolon that ends it or the parenthesis that closes its group.
func (r *declReader) spec(isType bool) {
	if r.tok != tokIdent {
		r.skip()
		return
	}
	name, start := r.lit(), r.off
	r.declared[name] = true
	r.next()
	switch {
	case isType && r.is("interface") && r.keep(name):
		r.skip()
		r.parts = append(r.parts, "type "+string(r.lex.src[start:r.off]))
		return
	case !isType:
		for r.tok == tokComma {
			if r.next() == tokIdent {
				r.declared[r.lit()] = true
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
	for ; r.tok != tokEOF; r.next() {
		switch r.tok {
		case tokLParen, tokLBrace:
			depth++
		case tokRParen, tokRBrace:
			if depth == 0 {
				return
			}
			depth--
		case tokSemicolon:
			if depth == 0 {
				return
			}
		}
	}
}

// tokKind is the class of a token, as far as readDecls needs to know it.
type tokKind int

const (
	tokEOF       tokKind = iota
	tokIdent             // an identifier or a keyword
	tokLiteral           // a number, string or rune
	tokSemicolon         // written, or inserted at a newline as Go's grammar says
	tokComma
	tokLParen // ( and [
	tokRParen // ) and ]
	tokLBrace
	tokRBrace
	tokIncDec // ++ and --, after which a newline ends the statement
	tokOther  // any other operator or punctuation
)

// goLexer splits Go source into tokens: identifiers (keywords included),
// literals, brackets, commas and semicolons, with the semicolons Go inserts
// at line ends; every other operator is tokOther. It skips comments and
// never allocates.
type goLexer struct {
	src  []byte
	pos  int
	semi bool // a newline here ends a statement: the last token allows it
	err  error
}

// next returns the next token and its extent in src.
func (l *goLexer) next() (tokKind, int, int) {
	src := l.src
	for l.pos < len(src) {
		start, c := l.pos, src[l.pos]
		switch {
		case c == '\n':
			l.pos++
			if l.semi {
				l.semi = false
				return tokSemicolon, start, start
			}
		case c == ' ' || c == '\t' || c == '\r':
			l.pos++
		case c == '/' && start+1 < len(src) && src[start+1] == '/':
			// A line comment ends at the newline, which is then read as
			// any other.
			for l.pos < len(src) && src[l.pos] != '\n' {
				l.pos++
			}
		case c == '/' && start+1 < len(src) && src[start+1] == '*':
			end := bytes.Index(src[start+2:], []byte("*/"))
			if end < 0 {
				return l.fail("comment not terminated")
			}
			l.pos = start + 2 + end + 2
			// A general comment that spans lines acts like a newline.
			if l.semi && bytes.IndexByte(src[start:l.pos], '\n') >= 0 {
				l.semi = false
				return tokSemicolon, start, start
			}
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80:
			for l.pos < len(src) && isIdentByte(src[l.pos]) {
				l.pos++
			}
			l.semi = endsStatement(src[start:l.pos])
			return tokIdent, start, l.pos
		case c >= '0' && c <= '9' || c == '.' && start+1 < len(src) && src[start+1] >= '0' && src[start+1] <= '9':
			// Digits, letters (bases, exponents, suffixes), points, and a
			// sign after an exponent's letter.
			for l.pos++; l.pos < len(src); l.pos++ {
				b := src[l.pos]
				if (b == '+' || b == '-') && strings.IndexByte("eEpP", src[l.pos-1]) >= 0 {
					continue
				}
				if !isIdentByte(b) && b != '.' {
					break
				}
			}
			l.semi = true
			return tokLiteral, start, l.pos
		case c == '"' || c == '\'':
			for l.pos++; ; l.pos++ {
				if l.pos >= len(src) || src[l.pos] == '\n' {
					return l.fail("string or rune not terminated")
				}
				if src[l.pos] == '\\' {
					l.pos++
					continue
				}
				if src[l.pos] == c {
					break
				}
			}
			l.pos++
			l.semi = true
			return tokLiteral, start, l.pos
		case c == '`':
			end := bytes.IndexByte(src[start+1:], '`')
			if end < 0 {
				return l.fail("raw string not terminated")
			}
			l.pos = start + 1 + end + 1
			l.semi = true
			return tokLiteral, start, l.pos
		default:
			l.pos++
			kind := tokOther
			switch c {
			case '(', '[':
				kind = tokLParen
			case ')', ']':
				kind = tokRParen
			case '{':
				kind = tokLBrace
			case '}':
				kind = tokRBrace
			case ',':
				kind = tokComma
			case ';':
				kind = tokSemicolon
			case '+', '-':
				if l.pos < len(src) && src[l.pos] == c {
					l.pos++
					kind = tokIncDec
				}
			}
			l.semi = kind == tokRParen || kind == tokRBrace || kind == tokIncDec
			return kind, start, l.pos
		}
	}
	if l.semi {
		l.semi = false
		return tokSemicolon, l.pos, l.pos
	}
	return tokEOF, l.pos, l.pos
}

func (l *goLexer) fail(msg string) (tokKind, int, int) {
	if l.err == nil {
		l.err = errors.New(msg)
	}
	l.pos = len(l.src)
	return tokEOF, l.pos, l.pos
}

// isIdentByte reports whether b continues an identifier. Bytes of UTF-8
// sequences count: outside strings and comments, Go allows them only in
// identifiers.
func isIdentByte(b byte) bool {
	return b == '_' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b >= 0x80
}

// endsStatement reports whether a newline after the identifier or keyword
// ident inserts a semicolon: after any identifier, and after the keywords
// break, continue, fallthrough and return, but no other.
func endsStatement(ident []byte) bool {
	switch string(ident) {
	case "break", "continue", "fallthrough", "return":
		return true
	case "case", "chan", "const", "default", "defer", "else", "for", "func", "go", "goto", "if",
		"import", "interface", "map", "package", "range", "select", "struct", "switch", "type", "var":
		return false
	}
	return true
}
