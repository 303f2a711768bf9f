package idemhttp

// The implementation of canonical JSON, fingerprints and body keys as it
// was before the single-pass scanner (parsing into map[string]any and []any
// with encoding/json's Decoder.Token, then writing the tree back), frozen
// here as the reference that the differential tests compare the scanner
// with: same bytes, same errors, for every input. Do not change it to make
// a test pass; it is what "the same behaviour" means.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// refFingerprint returns the SHA-256 of the request's canonical form. Field
// order and insignificant whitespace in a JSON body, the order of form fields
// and of query parameters with different names, and the excluded pointers
// never change it; everything else does. A body that cannot be parsed as its
// content type says is an *idemtype.Error of kind invalid-request.
func refFingerprint(r Request) ([]byte, error) {
	body, kind, err := refCanonicalBody(r.ContentType, r.Body, r.Exclude)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		io.WriteString(h, s)
	}
	field("idemgen-fingerprint-v1")
	field(strings.ToUpper(r.Method))
	field(r.Route)
	names := make([]string, 0, len(r.PathParams))
	for k := range r.PathParams {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		field(k)
		field(r.PathParams[k])
	}
	field(r.Query.Encode()) // sorted by name, values in order
	hn := append([]string(nil), r.HeaderNames...)
	for i := range hn {
		hn[i] = http.CanonicalHeaderKey(hn[i])
	}
	sort.Strings(hn)
	for _, name := range hn {
		field(name)
		vals := r.Header.Values(name)
		field(strconv.Itoa(len(vals)))
		for _, v := range vals {
			field(v)
		}
	}
	field(kind)
	field(string(body))
	return h.Sum(nil), nil
}

// refCanonicalBody returns the canonical form of a body and its kind: "json"
// for application/json and +json types, "form" for
// application/x-www-form-urlencoded, "raw" for anything else (hashed as is),
// "empty" for no body.
func refCanonicalBody(contentType string, body []byte, exclude []string) ([]byte, string, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, "empty", nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil && contentType != "" {
		return nil, "", badBody("Content-Type %q: %v", contentType, err)
	}
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		c, err := refCanonicalJSON(body, exclude)
		return c, "json", err
	case mt == "application/x-www-form-urlencoded":
		c, err := refCanonicalForm(body, exclude)
		return c, "form", err
	}
	return body, "raw", nil
}

// refCanonicalForm returns a form body with its fields sorted by name (values
// of one name keep their order) and the fields named by exclude (pointers of
// one segment, e.g. /client_ts) removed.
func refCanonicalForm(body []byte, exclude []string) ([]byte, error) {
	v, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, badBody("malformed form body: %v", err)
	}
	for name, vals := range v {
		if err := refCheckNUL(name + strings.Join(vals, "")); err != nil {
			return nil, err
		}
	}
	for _, p := range exclude {
		toks, err := refParsePointer(p)
		if err != nil {
			continue
		}
		for name := range v {
			if refCoversForm(toks, name) {
				v.Del(name)
			}
		}
	}
	return []byte(v.Encode()), nil
}

// refCoversForm reports whether toks name the form field name or a field
// nested under it: name is toks[0], then "[toks[1]]" and so on (any one
// bracketed step for a * token), then anything bracketed.
var refFormName = regexp.MustCompile(`^([^\[\]]+)((?:\[[^\[\]]*\])*)$`)

func refCoversForm(toks []string, name string) bool {
	steps := []string{name}
	if m := refFormName.FindStringSubmatch(name); m != nil && m[2] != "" {
		steps = []string{m[1]}
		for _, s := range strings.Split(strings.TrimSuffix(strings.TrimPrefix(m[2], "["), "]"), "][") {
			steps = append(steps, s)
		}
	}
	if len(toks) > len(steps) {
		return false
	}
	for i := range toks {
		if toks[i] != "*" && toks[i] != steps[i] {
			return false
		}
	}
	return true
}

// refCanonicalJSON parses body and writes it back with object members sorted
// by name (byte order), no insignificant whitespace, numbers in a normal
// form that keeps their exact value (1.0, 1 and 10e-1 are the same number),
// and the members or elements named by the JSON Pointers in exclude removed.
// Invalid UTF-8, duplicate member names, nesting deeper than MaxJSONDepth
// and trailing data are errors. refCanonicalJSON of its own output returns the
// same bytes.
func refCanonicalJSON(body []byte, exclude []string) ([]byte, error) {
	v, err := refParseJSON(body)
	if err != nil {
		return nil, err
	}
	for _, p := range exclude {
		toks, err := refParsePointer(p)
		if err != nil {
			return nil, err
		}
		v = refRemovePointer(v, toks)
	}
	var buf bytes.Buffer
	refWriteCanonical(&buf, v)
	return buf.Bytes(), nil
}

// refParseJSON parses a whole JSON body (numbers as json.Number), refusing
// what refCanonicalJSON refuses.
func refParseJSON(body []byte) (any, error) {
	if !utf8.Valid(body) {
		return nil, badBody("the JSON body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	v, err := refParseValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badBody("malformed JSON body: data after the top-level value")
	}
	return v, nil
}

func refParseValue(dec *json.Decoder, depth int) (any, error) {
	if depth > MaxJSONDepth {
		return nil, badBody("the JSON body is nested deeper than %d levels", MaxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, badBody("malformed JSON body: %v", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := map[string]any{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, badBody("malformed JSON body: %v", err)
				}
				k := kt.(string)
				if err := refCheckNUL(k); err != nil {
					return nil, err
				}
				if _, dup := obj[k]; dup {
					return nil, badBody("the JSON body repeats the member name %q", k)
				}
				if obj[k], err = refParseValue(dec, depth+1); err != nil {
					return nil, err
				}
			}
			_, err := dec.Token() // '}'
			return obj, refWrapSyntax(err)
		case '[':
			arr := []any{}
			for dec.More() {
				el, err := refParseValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, el)
			}
			_, err := dec.Token() // ']'
			return arr, refWrapSyntax(err)
		}
		return nil, badBody("malformed JSON body: unexpected %v", t)
	case string:
		return t, refCheckNUL(t)
	default:
		return t, nil // json.Number, bool, nil
	}
}

// refCheckNUL refuses a string holding U+0000: PostgreSQL's text and jsonb
// cannot store it, so a phase that saves it would fail on every retry.
func refCheckNUL(s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return badBody("the body contains a NUL character (\\u0000), which cannot be stored")
	}
	return nil
}

func refWrapSyntax(err error) error {
	if err != nil {
		return badBody("malformed JSON body: %v", err)
	}
	return nil
}

// refParsePointer splits an RFC 6901 JSON Pointer into its unescaped tokens.
func refParsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, errors.New("idemhttp: empty JSON Pointer (it would exclude the whole body)")
	}
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("idemhttp: JSON Pointer %q must start with /", p)
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		toks[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(t)
	}
	return toks, nil
}

// refRemovePointer removes the value at toks from v, if present, and returns v.
func refRemovePointer(v any, toks []string) any {
	if len(toks) == 0 {
		return v
	}
	last := len(toks) == 1
	switch n := v.(type) {
	case map[string]any:
		child, ok := n[toks[0]]
		if !ok {
			return v
		}
		if last {
			delete(n, toks[0])
		} else {
			n[toks[0]] = refRemovePointer(child, toks[1:])
		}
	case []any:
		if toks[0] == "*" { // every element
			if last {
				return []any{}
			}
			for i := range n {
				n[i] = refRemovePointer(n[i], toks[1:])
			}
			return n
		}
		i, err := strconv.Atoi(toks[0])
		if err != nil || i < 0 || i >= len(n) || strconv.Itoa(i) != toks[0] {
			return v
		}
		if last {
			return append(n[:i:i], n[i+1:]...)
		}
		n[i] = refRemovePointer(n[i], toks[1:])
	}
	return v
}

func refWriteCanonical(buf *bytes.Buffer, v any) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			refWriteString(buf, k)
			buf.WriteByte(':')
			refWriteCanonical(buf, t[k])
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, el := range t {
			if i > 0 {
				buf.WriteByte(',')
			}
			refWriteCanonical(buf, el)
		}
		buf.WriteByte(']')
	case string:
		refWriteString(buf, t)
	case json.Number:
		buf.WriteString(refCanonicalNumber(string(t)))
	case bool:
		buf.WriteString(strconv.FormatBool(t))
	case nil:
		buf.WriteString("null")
	}
}

func refWriteString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	buf.Truncate(buf.Len() - 1) // Encode appends a newline
}

// refCanonicalNumber rewrites a JSON number literal so that equal values are
// equal strings: an integer is written as digits ("100"); anything else as
// significant digits, "e" and a decimal exponent ("15e-1"). Zero is "0",
// whatever its sign. No precision is lost.
func refCanonicalNumber(lit string) string {
	orig := lit
	neg := strings.HasPrefix(lit, "-")
	lit = strings.TrimPrefix(lit, "-")
	mant, expPart, _ := strings.Cut(strings.ToLower(lit), "e")
	exp := 0
	if expPart != "" {
		e, err := strconv.Atoi(expPart)
		if err != nil || e > 1<<30 || e < -(1<<30) {
			return orig // an exponent this large: keep the literal, still exact
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	exp -= len(frac)
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return "0"
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	digits = trimmed
	sign := ""
	if neg {
		sign = "-"
	}
	if exp >= 0 && exp <= 20 {
		return sign + digits + strings.Repeat("0", exp)
	}
	return sign + digits + "e" + strconv.Itoa(exp)
}

// refBodyKey returns the key held by the member of the JSON body that
// rule.Pointer names: a string as is, or an integer written as digits
// (-0 is 0). The key follows the same rules as a header's (length,
// characters, format). A body without the member (or with null there) is an
// *idemtype.Error of kind missing-key; another value (an object, a fraction, an
// empty string) is invalid-key; a body that is not JSON is invalid-request.
func refBodyKey(body []byte, rule KeyRule) (string, error) {
	toks, err := refParsePointer(rule.Pointer)
	if err != nil {
		return "", err
	}
	what := "the body's " + rule.Pointer
	if len(bytes.TrimSpace(body)) == 0 {
		return "", &idemtype.Error{Kind: idemtype.KindMissingKey, Detail: fmt.Sprintf("the body is empty; send a JSON body whose %s is the key", rule.Pointer)}
	}
	v, err := refParseJSON(body)
	if err != nil {
		return "", err
	}
	for _, tok := range toks {
		obj, ok := v.(map[string]any)
		if !ok {
			v = nil
			break
		}
		v = obj[tok]
	}
	var key string
	switch t := v.(type) {
	case nil:
		return "", &idemtype.Error{Kind: idemtype.KindMissingKey, Detail: fmt.Sprintf("%s is missing: it is the key (a unique string per event or request)", what)}
	case string:
		key = t
	case json.Number:
		lit := string(t)
		if !refIntegerRE.MatchString(lit) {
			return "", invalid("%s is %s; a key in the body is a string or an integer written as digits", what, lit)
		}
		if key = lit; lit == "-0" {
			key = "0"
		}
	default:
		return "", invalid("%s is %s; a key in the body is a string or an integer", what, refJSONKind(v))
	}
	return key, checkKey(key, rule, keySource{pointer: rule.Pointer}) // the rules on keys are not what this reference is for
}

var refIntegerRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

func refJSONKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}
