// Package idemhttp holds the HTTP side of the Idempotency-Key protocol that
// depends on neither a web framework nor the engine (its errors and
// vocabulary are runtime/idemtype's): parsing the key (from its header or
// from a member of the JSON body) and fingerprinting requests.
package idemhttp

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dunglas/httpsfv"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// KeyRule is the per-operation rule for the key: where it comes from and
// what it may look like.
type KeyRule struct {
	Header string // header name; default idemtype.DefaultKeyHeader
	// Pointer, when set, is a JSON Pointer (RFC 6901) into the JSON request
	// body whose member holds the key (a webhook's event id): a string, or
	// an integer written as digits. Header is then ignored and the key is
	// always required.
	Pointer   string
	Required  bool // a missing key is an error (otherwise the request runs without idempotency)
	MaxLength int  // default idemtype.DefaultMaxKeyLength
	// MinLength, when set, refuses shorter keys (invalid-key): a short
	// key is one another intent's client may send too (idemtype.WeakKey).
	MinLength int
	Format    idemtype.KeyFormat // default any
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// ParseKey returns the key carried by h under rule. In the default format
// (idemtype.KeyFormatAny) the value may be an RFC 8941 sf-string ("abc",
// as the IETF draft specifies) or a bare value: visible ASCII without
// quotes, commas or spaces. In the raw format (idemtype.KeyFormatRaw) it is
// the value as sent, past the spaces HTTP strips around it: printable UTF-8,
// spaces included, never unquoted. It returns "" and nil when the header is
// absent and not required.
// Errors are *idemtype.Error of kind missing-key or invalid-key.
func ParseKey(h http.Header, rule KeyRule) (string, error) {
	name := rule.Header
	if name == "" {
		name = idemtype.DefaultKeyHeader
	}
	values := h.Values(name)
	switch {
	case len(values) == 0 && rule.Required:
		return "", &idemtype.Error{Kind: idemtype.KindMissingKey, Detail: "send an " + name + " header (a unique string per logical request)"}
	case len(values) == 0:
		return "", nil
	case len(values) > 1:
		return "", invalid("the %s header must appear once, got %d fields", name, len(values))
	}
	if rule.Format == idemtype.KeyFormatRaw {
		key := strings.Trim(values[0], " \t")
		return key, checkKey(key, rule, keySource{header: name})
	}
	key, err := parseKeyValue(values[0])
	if err != nil {
		return "", invalid("%s: %s", name, err)
	}
	return key, checkKey(key, rule, keySource{header: name})
}

// checkKey applies the rules every key follows, wherever it came from:
// not empty, visible ASCII or spaces only, at most MaxLength characters,
// and a UUID when the format says so; in the raw format, printable UTF-8
// and spaces, MaxLength characters (not bytes). what names the key's
// source in errors.
func checkKey(key string, rule KeyRule, what keySource) error {
	max := rule.MaxLength
	if max <= 0 {
		max = idemtype.DefaultMaxKeyLength
	}
	if n := utf8.RuneCountInString(key); key != "" && n < rule.MinLength {
		return invalid("%s is %d characters long; at least %d are required (key.minLength): mint a UUID per intent", what, n, rule.MinLength)
	}
	if rule.Format == idemtype.KeyFormatRaw {
		return checkRawKey(key, max, what)
	}
	switch {
	case key == "":
		return invalid("%s is empty", what)
	case len(key) > max:
		return invalid("%s is %d characters long; at most %d are allowed", what, len(key), max)
	case rule.Format == idemtype.KeyFormatUUID && !uuidRE.MatchString(key):
		return invalid("%s must be a UUID (8-4-4-4-12 hexadecimal digits)", what)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return invalid("%s has the byte 0x%02x at %d; a key is printable ASCII", what, c, i)
		}
	}
	return nil
}

// checkRawKey is checkKey in the raw format: any character a person can
// type or paste into a key, Unicode's graphic characters (letters, marks,
// numbers, punctuation, symbols, spaces) and its invisible format
// characters (the joiner of an emoji sequence, a soft hyphen), and none
// that hides or reorders what is shown (the bidirectional controls), nor
// controls, nor U+FFFD (what invalid bytes or a lone surrogate decode to:
// two different keys would read as one). At most max characters. Its
// errors name the rule.
func checkRawKey(key string, max int, what keySource) error {
	if key == "" {
		return invalid("%s is empty (key format raw: 1 to %d printable characters)", what, max)
	}
	n := 0
	for i, r := range key {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(key[i:], "\uFFFD"):
			return invalid("%s is not valid UTF-8 at byte %d (key format raw: printable UTF-8 characters and spaces)", what, i)
		case r == utf8.RuneError:
			return invalid("%s has U+FFFD, the replacement character, at byte %d (key format raw: a key decoded from invalid text is refused)", what, i)
		case bidiControl(r):
			return invalid("%s has the bidirectional control %U at byte %d (key format raw: no character that reorders what is shown)", what, r, i)
		case !unicode.IsGraphic(r) && !unicode.Is(unicode.Cf, r):
			return invalid("%s has the character %U at byte %d (key format raw: printable characters and spaces, no controls or tabs)", what, r, i)
		}
		n++
	}
	if n > max {
		return invalid("%s is %d characters long (key format raw: at most %d)", what, n, max)
	}
	return nil
}

// bidiControl reports whether r is one of Unicode's bidirectional
// formatting characters (UAX #9), which change the order text is shown
// in.
func bidiControl(r rune) bool {
	return r == 0x061C || r == 0x200E || r == 0x200F || 0x202A <= r && r <= 0x202E || 0x2066 <= r && r <= 0x2069
}

// keySource names where a key comes from, in errors: a header or a member
// of the body. Its text is only made for an error.
type keySource struct{ header, pointer string }

func (s keySource) String() string {
	if s.header != "" {
		return "the " + s.header + " header"
	}
	return "the body's " + s.pointer
}

// BodyKey returns the key held by the member of the JSON body that
// rule.Pointer names: a string as is, or an integer written as digits
// (-0 is 0). The key follows the same rules as a header's (length,
// characters, format). A body without the member (or with null there) is an
// *idemtype.Error of kind missing-key; another value (an object, a fraction, an
// empty string) is invalid-key; a body that is not JSON is invalid-request.
func BodyKey(body []byte, rule KeyRule) (string, error) {
	if err := checkPointer(rule.Pointer); err != nil {
		return "", err
	}
	what := keySource{pointer: rule.Pointer}
	if len(bytes.TrimSpace(body)) == 0 {
		return "", &idemtype.Error{Kind: idemtype.KindMissingKey, Detail: fmt.Sprintf("the body is empty; send a JSON body whose %s is the key", rule.Pointer)}
	}
	p := getCanon()
	defer p.release()
	if err := p.appendJSON(body, nil); err != nil {
		return "", err
	}
	lit := p.memberValue(body, rule.Pointer)
	var key string
	switch {
	case lit == nil || lit[0] == 'n':
		return "", &idemtype.Error{Kind: idemtype.KindMissingKey, Detail: fmt.Sprintf("%s is missing: it is the key (a unique string per event or request)", what)}
	case lit[0] == '"':
		key = string(appendUnescaped(nil, lit[1:len(lit)-1]))
	case lit[0] == '-' || '0' <= lit[0] && lit[0] <= '9':
		if !integerRE.Match(lit) {
			return "", invalid("%s is %s; a key in the body is a string or an integer written as digits", what, lit)
		}
		if key = string(lit); key == "-0" {
			key = "0"
		}
	default:
		return "", invalid("%s is %s; a key in the body is a string or an integer", what, jsonKind(lit[0]))
	}
	return key, checkKey(key, rule, what)
}

var integerRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// jsonKind names the kind of the JSON value that starts with c.
func jsonKind(c byte) string {
	switch c {
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "a boolean"
}

func invalid(format string, args ...any) error {
	return &idemtype.Error{Kind: idemtype.KindInvalidKey, Detail: fmt.Sprintf(format, args...)}
}

func parseKeyValue(raw string) (string, error) {
	v := strings.Trim(raw, " \t")
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			return "", fmt.Errorf("control character 0x%02x at byte %d", c, i)
		} else if c > 0x7e {
			return "", fmt.Errorf("non-ASCII byte 0x%02x at byte %d", c, i)
		}
	}
	if strings.HasPrefix(v, `"`) {
		item, err := httpsfv.UnmarshalItem([]string{v})
		if err != nil {
			return "", fmt.Errorf("not a valid structured-field string: %v", err)
		}
		s, ok := item.Value.(string)
		if !ok || len(item.Params.Names()) > 0 {
			return "", fmt.Errorf("must be a plain string without parameters")
		}
		return s, nil
	}
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case ' ', '\t', '"', ',', '\\':
			return "", fmt.Errorf("a bare value may not contain %q; quote it as a structured-field string", v[i])
		}
	}
	return v, nil
}

// BodyPlacement reads an operation's placement from the JSON body, at
// pointer (idemtype.PlacementBody): a string, or an integer written as
// digits. A body without it is an invalid request.
func BodyPlacement(body []byte, pointer string) (string, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return "", invalidRequest("the body is empty; send a JSON body whose %s places the request (the tenant or account it is for)", pointer)
	}
	p := getCanon()
	defer p.release()
	if err := p.appendJSON(body, nil); err != nil {
		return "", err
	}
	switch lit := p.memberValue(body, pointer); {
	case lit == nil || lit[0] == 'n':
		return "", invalidRequest("the body's %s is missing: it places the request (the tenant or account it is for)", pointer)
	case lit[0] == '"':
		return string(appendUnescaped(nil, lit[1:len(lit)-1])), nil
	case integerRE.Match(lit):
		return string(lit), nil
	default:
		return "", invalidRequest("the body's %s is %s; a placement is a string or an integer", pointer, jsonKind(lit[0]))
	}
}

func invalidRequest(format string, args ...any) error {
	return &idemtype.Error{Kind: idemtype.KindInvalidRequest, Detail: fmt.Sprintf(format, args...)}
}
