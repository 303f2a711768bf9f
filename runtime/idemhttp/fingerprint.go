package idemhttp

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// MaxJSONDepth bounds the nesting of JSON bodies that are fingerprinted.
const MaxJSONDepth = 64

// Request is what a fingerprint covers.
type Request struct {
	Method      string
	Route       string            // the route template, e.g. /payments/{id}
	PathParams  map[string]string // by parameter name
	Query       url.Values
	Header      http.Header
	HeaderNames []string // request headers that are part of the request's identity
	ContentType string
	Body        []byte
	Exclude     []string // JSON Pointers (RFC 6901) removed from the body first
}

// Fingerprint returns the SHA-256 of the request's canonical form. Field
// order and insignificant whitespace in a JSON body, the order of form fields
// and of query parameters with different names, and the excluded pointers
// never change it; everything else does. A body that cannot be parsed as its
// content type says is an *idemtype.Error of kind invalid-request.
//
// The canonical form is a sequence of fields, each its length (8 bytes, big
// endian) and its bytes: a version tag, the method in upper case, the route,
// each path parameter's name and value by name, the query (url.Values'
// Encode), each fingerprinted header's canonical name, its number of values
// and its values, the body's kind and its canonical form. It is written in
// one buffer from a pool and hashed at once.
func Fingerprint(r Request) ([]byte, error) {
	kind, err := bodyKind(r.ContentType, r.Body)
	if err != nil {
		return nil, err
	}
	p := getCanon()
	defer p.release()
	b := appendField(p.out, "idemgen-fingerprint-v1")
	b = appendUpperField(b, r.Method)
	b = appendField(b, r.Route)
	var nameBuf [8]string
	names := nameBuf[:0]
	for k := range r.PathParams {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		b = appendField(b, k)
		b = appendField(b, r.PathParams[k])
	}
	at := len(b)
	b = appendQuery(binary.BigEndian.AppendUint64(b, 0), r.Query) // sorted by name, values in order
	binary.BigEndian.PutUint64(b[at:], uint64(len(b)-at-8))
	hn := append(nameBuf[:0], r.HeaderNames...)
	for i := range hn {
		hn[i] = http.CanonicalHeaderKey(hn[i])
	}
	slices.Sort(hn)
	for _, name := range hn {
		vals := r.Header[name]
		b = appendField(b, name)
		at := len(b)
		b = strconv.AppendInt(binary.BigEndian.AppendUint64(b, 0), int64(len(vals)), 10)
		binary.BigEndian.PutUint64(b[at:], uint64(len(b)-at-8))
		for _, v := range vals {
			b = appendField(b, v)
		}
	}
	b = appendField(b, kind)
	at = len(b)
	p.out = binary.BigEndian.AppendUint64(b, 0)
	if err := p.appendBody(kind, r.ContentType, r.Body, r.Exclude); err != nil {
		return nil, err
	}
	binary.BigEndian.PutUint64(p.out[at:], uint64(len(p.out)-at-8))
	sum := sha256.Sum256(p.out)
	return sum[:], nil
}

func appendField(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint64(b, uint64(len(s))), s...)
}

// appendUpperField appends strings.ToUpper(s) as a field.
func appendUpperField(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return appendField(b, strings.ToUpper(s))
		}
	}
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

// appendQuery appends v.Encode().
func appendQuery(b []byte, v url.Values) []byte {
	var keyBuf [8]string
	keys := keyBuf[:0]
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	start := len(b)
	for _, k := range keys {
		for _, val := range v[k] {
			if len(b) > start {
				b = append(b, '&')
			}
			b = append(appendQueryEscape(b, k), '=')
			b = appendQueryEscape(b, val)
		}
	}
	return b
}

// appendQueryEscape appends url.QueryEscape(s).
func appendQueryEscape(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b = append(b, c)
		case c == ' ':
			b = append(b, '+')
		default:
			b = append(b, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
		}
	}
	return b
}

// CanonicalBody returns the canonical form of a body and its kind: "json"
// for application/json and +json types, "form" for
// application/x-www-form-urlencoded, "multipart" for multipart/form-data
// (CanonicalMultipart), "raw" for anything else (hashed as is), "empty"
// for no body.
func CanonicalBody(contentType string, body []byte, exclude []string) ([]byte, string, error) {
	kind, err := bodyKind(contentType, body)
	switch {
	case err != nil:
		return nil, "", err
	case kind == "empty":
		return nil, kind, nil
	case kind == "raw":
		return body, kind, nil
	}
	p := getCanon()
	defer p.release()
	if err := p.appendBody(kind, contentType, body, exclude); err != nil {
		return nil, kind, err
	}
	return bytes.Clone(p.out), kind, nil
}

// bodyKind returns the kind of body CanonicalBody says it is.
func bodyKind(contentType string, body []byte) (string, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return "empty", nil
	}
	mt, err := mediaType(contentType)
	if err != nil && contentType != "" {
		return "", badBody("Content-Type %q: %v", contentType, err)
	}
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return "json", nil
	case mt == "application/x-www-form-urlencoded":
		return "form", nil
	case mt == "multipart/form-data":
		return "multipart", nil
	}
	return "raw", nil
}

// mediaType returns the media type of a Content-Type value as
// mime.ParseMediaType does, without its allocations for the common values:
// a lower-case type/subtype, alone or with charset=utf-8.
func mediaType(v string) (string, error) {
	base, params, hasParams := strings.Cut(v, ";")
	if plainMediaType(base) && (!hasParams || params == " charset=utf-8" || params == "charset=utf-8") {
		return base, nil
	}
	mt, _, err := mime.ParseMediaType(v)
	return mt, err
}

// plainMediaType reports whether s is type/subtype, both RFC 2045 tokens,
// in lower case.
func plainMediaType(s string) bool {
	slash := -1
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '/' && slash < 0 && i > 0:
			slash = i
		case c <= ' ' || c >= 0x7f || 'A' <= c && c <= 'Z' || strings.IndexByte(`()<>@,;:\"/[]?=`, c) >= 0:
			return false
		}
	}
	return slash > 0 && slash < len(s)-1
}

// appendBody appends the canonical form of a body of kind "json" or "form"
// to p.out, or the body itself when it is "raw".
func (p *canon) appendBody(kind, contentType string, body []byte, exclude []string) error {
	switch kind {
	case "json":
		return p.appendJSON(body, exclude)
	case "form":
		c, err := CanonicalForm(body, exclude)
		p.out = append(p.out, c...)
		return err
	case "multipart":
		c, err := CanonicalMultipart(contentType, body, exclude)
		p.out = append(p.out, c...)
		return err
	case "raw":
		p.out = append(p.out, body...)
	}
	return nil
}

func badBody(format string, args ...any) error {
	return &idemtype.Error{Kind: idemtype.KindInvalidRequest, Detail: fmt.Sprintf(format, args...)}
}

// CanonicalForm returns a form body with its fields sorted by name (values
// of one name keep their order) and the fields named by exclude removed. A
// form API nests fields by brackets (expand[], expand[0], metadata[k],
// metadata[a][b]); a pointer names a field and everything nested under it:
// /expand covers expand, expand[] and expand[N], /metadata every
// metadata[...], /metadata/trace_id metadata[trace_id] (and what nests
// under it), and * (idemtype.EveryElement) stands for any one step, so
// /expand/* covers expand[] and expand[N] but not expand itself.
func CanonicalForm(body []byte, exclude []string) ([]byte, error) {
	v, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, badBody("malformed form body: %v", err)
	}
	for name, vals := range v {
		if err := checkNUL(name + strings.Join(vals, "")); err != nil {
			return nil, err
		}
	}
	var ptrs [][]string
	for _, p := range exclude {
		if toks, err := idemtype.ParsePointer(p); err == nil {
			ptrs = append(ptrs, toks)
		}
	}
	if len(ptrs) > 0 {
		for name := range v {
			steps := idemtype.FormSteps(name)
			for _, toks := range ptrs {
				if coversForm(toks, steps) {
					delete(v, name)
					break
				}
			}
		}
	}
	return appendQuery([]byte{}, v), nil
}

// CanonicalMultipart returns a multipart/form-data body (of Content-Type
// contentType, which names its boundary) as its parts, not its bytes: for
// each part its field name, file name, content type (as
// mime.FormatMediaType writes it: lower case, parameters sorted; a part
// without one is text/plain, or application/octet-stream for a file, as
// RFC 7578 says) and body, decoded of its transfer encoding; the parts
// sorted by name (parts of one name keep their order), and those named by
// exclude removed, as CanonicalForm's fields are. A client that encodes the
// same form again on a retry (a new random boundary, as browsers, Python's
// requests and curl -F draw) sends the same request. A body that does not
// parse, a part without a name, and a missing boundary are errors.
func CanonicalMultipart(contentType string, body []byte, exclude []string) ([]byte, error) {
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, badBody("Content-Type %q: %v", contentType, err)
	}
	boundary := params["boundary"]
	if boundary == "" {
		return nil, badBody("multipart/form-data without a boundary parameter")
	}
	type formPart struct{ name, filename, ctype, body string }
	var parts []formPart
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, badBody("malformed multipart body: %v", err)
		}
		_, disp, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		if err != nil || disp["name"] == "" {
			return nil, badBody("a part of the multipart body has no Content-Disposition: form-data; name=...")
		}
		fp := formPart{name: disp["name"], filename: disp["filename"]}
		switch ct := part.Header.Get("Content-Type"); {
		case ct != "":
			mt, ps, err := mime.ParseMediaType(ct)
			if err != nil {
				return nil, badBody("part %q: Content-Type %q: %v", fp.name, ct, err)
			}
			fp.ctype = mime.FormatMediaType(mt, ps)
		case fp.filename != "":
			fp.ctype = "application/octet-stream"
		default:
			fp.ctype = "text/plain"
		}
		b, err := io.ReadAll(part)
		if err != nil {
			return nil, badBody("malformed multipart body: part %q: %v", fp.name, err)
		}
		fp.body = string(b)
		if err := checkNUL(fp.name + fp.filename); err != nil {
			return nil, err
		}
		parts = append(parts, fp)
	}
	var ptrs [][]string
	for _, p := range exclude {
		if toks, err := idemtype.ParsePointer(p); err == nil {
			ptrs = append(ptrs, toks)
		}
	}
	parts = slices.DeleteFunc(parts, func(fp formPart) bool {
		steps := idemtype.FormSteps(fp.name)
		return slices.ContainsFunc(ptrs, func(toks []string) bool { return coversForm(toks, steps) })
	})
	slices.SortStableFunc(parts, func(a, b formPart) int { return strings.Compare(a.name, b.name) })
	out := binary.BigEndian.AppendUint64(nil, uint64(len(parts)))
	for _, fp := range parts {
		out = appendField(out, fp.name)
		out = appendField(out, fp.filename)
		out = appendField(out, fp.ctype)
		out = appendField(out, fp.body)
	}
	return out, nil
}

// coversForm reports whether a pointer's tokens name a form field of these
// steps or one nested under it: they are a prefix of the steps, * standing
// for any one.
func coversForm(toks, steps []string) bool {
	if len(toks) > len(steps) {
		return false
	}
	for i, t := range toks {
		if t != steps[i] && t != idemtype.EveryElement {
			return false
		}
	}
	return true
}

// CanonicalJSON parses body and writes it back with object members sorted
// by name (byte order), no insignificant whitespace, numbers in a normal
// form that keeps their exact value (1.0, 1 and 10e-1 are the same number),
// and the members or elements named by the JSON Pointers in exclude removed
// (a * step at an array, idemtype.EveryElement, names every element).
// Invalid UTF-8, duplicate member names, nesting deeper than MaxJSONDepth
// and trailing data are errors. CanonicalJSON of its own output returns the
// same bytes.
func CanonicalJSON(body []byte, exclude []string) ([]byte, error) {
	p := getCanon()
	defer p.release()
	if err := p.appendJSON(body, exclude); err != nil {
		return nil, err
	}
	return bytes.Clone(p.out), nil
}

// checkNUL refuses a string holding U+0000 (see errNUL).
func checkNUL(s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return errNUL()
	}
	return nil
}

// checkPointer refuses what is not an RFC 6901 JSON Pointer to a part of
// the body (idemtype.CheckPointer), in idemhttp's words.
func checkPointer(p string) error {
	err := idemtype.CheckPointer(p)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, idemtype.ErrEmptyPointer):
		return fmt.Errorf("idemhttp: %w (it would exclude the whole body)", err)
	}
	return fmt.Errorf("idemhttp: %w", err)
}

// RouteParams returns the names of the path parameters of an OpenAPI path
// template, in order: id in /payments/{id}, and in {.id}, {;id} and {id*},
// as oapi-codegen names them. They are the names a Request's PathParams
// are keyed by.
func RouteParams(route string) []string {
	var names []string
	for {
		i := strings.IndexByte(route, '{')
		if i < 0 {
			return names
		}
		j := strings.IndexByte(route[i:], '}')
		if j < 0 {
			return names
		}
		names = append(names, strings.TrimSuffix(strings.TrimLeft(route[i+1:i+j], ".;?"), "*"))
		route = route[i+j+1:]
	}
}
