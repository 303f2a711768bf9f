package idemtype

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// EveryElement is the reference token that, in a fingerprint exclusion,
// steps into every element of an array: /items/*/client_ts leaves out each
// item's client_ts, /items/* every item. RFC 6901 has no wildcard; "*" is
// one only where the body has an array (an object's member named "*" is
// still that member), and "-", which RFC 6901 gives to the element after
// the last, keeps that meaning: it names nothing in a request.
const EveryElement = "*"

// ErrEmptyPointer is CheckPointer's error for "", the pointer to the whole
// document, which no x-idempotency field may name.
var ErrEmptyPointer = errors.New("empty JSON Pointer")

// CheckPointer reports what makes p other than an RFC 6901 JSON Pointer to
// a part of a document: ErrEmptyPointer for "", and an error for a pointer
// that does not start with /. It allocates only for an error.
func CheckPointer(p string) error {
	switch {
	case p == "":
		return ErrEmptyPointer
	case p[0] != '/':
		return fmt.Errorf("JSON Pointer %q must start with /", p)
	}
	return nil
}

// ParsePointer splits a JSON Pointer (RFC 6901) into its reference tokens,
// unescaped: ~1 is /, ~0 is ~. A ~ followed by anything else is kept as it
// is, as the runtime's fingerprint has always read it. Errors are those of
// CheckPointer.
func ParsePointer(p string) ([]string, error) {
	if err := CheckPointer(p); err != nil {
		return nil, err
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		toks[i] = UnescapePointerToken(t)
	}
	return toks, nil
}

// UnescapePointerToken returns the member name or index a reference token
// names: ~1 becomes /, then ~0 becomes ~.
func UnescapePointerToken(tok string) string {
	if strings.IndexByte(tok, '~') < 0 {
		return tok
	}
	return tokenUnescaper.Replace(tok)
}

// EscapePointerToken returns the reference token that names the member
// name: ~ becomes ~0 and / becomes ~1.
func EscapePointerToken(name string) string {
	if strings.IndexAny(name, "~/") < 0 {
		return name
	}
	return tokenEscaper.Replace(name)
}

var (
	tokenUnescaper = strings.NewReplacer("~1", "/", "~0", "~")
	tokenEscaper   = strings.NewReplacer("~", "~0", "/", "~1")
)

// PointerTokenIs reports whether the escaped reference token tok names the
// member name, as UnescapePointerToken(tok) == string(name) would, without
// allocating.
func PointerTokenIs(tok string, name []byte) bool {
	j := 0
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c == '~' && i+1 < len(tok) && (tok[i+1] == '0' || tok[i+1] == '1') {
			c = "~/"[tok[i+1]-'0']
			i++
		}
		if j >= len(name) || name[j] != c {
			return false
		}
		j++
	}
	return j == len(name)
}

// FormSteps splits a form field's name the way form APIs nest fields:
// "expand[]" is [expand, ""], "metadata[a][b]" is [metadata, a, b]. A name
// not of that shape (no bracket, or brackets that do not close in order) is
// its one step.
func FormSteps(name string) []string {
	i := strings.IndexByte(name, '[')
	if i <= 0 || !strings.HasSuffix(name, "]") || strings.IndexByte(name[:i], ']') >= 0 {
		return []string{name}
	}
	steps := []string{name[:i]}
	for rest := name[i:]; rest != ""; {
		if rest[0] != '[' {
			return []string{name}
		}
		j := strings.IndexByte(rest, ']')
		if j < 0 || strings.IndexByte(rest[1:j], '[') >= 0 {
			return []string{name}
		}
		steps = append(steps, rest[1:j])
		rest = rest[j+1:]
	}
	return steps
}

// Lookup returns the value at JSON Pointer p in doc, a document as
// encoding/json decodes into an any (objects as map[string]any, arrays as
// []any), and whether p names one.
func Lookup(doc any, p string) (any, bool) {
	toks, err := ParsePointer(p)
	if err != nil {
		return nil, false
	}
	for _, t := range toks {
		switch x := doc.(type) {
		case map[string]any:
			v, ok := x[t]
			if !ok {
				return nil, false
			}
			doc = v
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			doc = x[i]
		default:
			return nil, false
		}
	}
	return doc, true
}
