package idemhttp

import (
	"bytes"
	"errors"
	"mime/multipart"
	"net/textproto"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// part is one part of a multipart/form-data body: a field, or a file when
// filename is set.
type part struct{ name, filename, ctype, body string }

// multipartBody encodes parts under boundary, as a client that re-encodes
// a form on every attempt does (browsers, Python requests, curl -F each
// draw a new random boundary).
func multipartBody(t *testing.T, boundary string, parts ...part) (contentType string, body []byte) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	if err := w.SetBoundary(boundary); err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		disp := `form-data; name="` + p.name + `"`
		if p.filename != "" {
			disp += `; filename="` + p.filename + `"`
		}
		h.Set("Content-Disposition", disp)
		if p.ctype != "" {
			h.Set("Content-Type", p.ctype)
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		pw.Write([]byte(p.body))
	}
	w.Close()
	return w.FormDataContentType(), b.Bytes()
}

// TestFingerprintMultipart: a multipart/form-data body is fingerprinted by
// its parts (names, filenames, content types, bodies), not its bytes: the
// same form re-encoded with another boundary, its fields in another order,
// or an excluded field changed is the same request; another file, name or
// content type is another.
func TestFingerprintMultipart(t *testing.T) {
	doc := part{name: "document", filename: "invoice.pdf", ctype: "application/pdf", body: "%PDF-1.7 ..."}
	fields := []part{{name: "amount", body: "100"}, {name: "csrf_token", body: "a1"}, doc}
	sum := func(boundary string, parts ...part) string {
		ct, body := multipartBody(t, boundary, parts...)
		return fp(t, Request{Method: "POST", Route: "/uploads", ContentType: ct, Body: body, Exclude: []string{"/csrf_token"}})
	}
	a := sum("boundary-one", fields...)
	if sum("----WebKitFormBoundary7MA4YWxkTrZu0gW", fields...) != a {
		t.Error("another boundary changed the fingerprint")
	}
	if sum("b3", doc, part{name: "csrf_token", body: "zz"}, part{name: "amount", body: "100"}) != a {
		t.Error("another order of fields, or an excluded field, changed the fingerprint")
	}
	for what, parts := range map[string][]part{
		"another file":         {fields[0], fields[1], {name: "document", filename: "invoice.pdf", ctype: "application/pdf", body: "%PDF-1.7 other"}},
		"another filename":     {fields[0], fields[1], {name: "document", filename: "receipt.pdf", ctype: "application/pdf", body: doc.body}},
		"another content type": {fields[0], fields[1], {name: "document", filename: "invoice.pdf", ctype: "text/plain", body: doc.body}},
		"another amount":       {{name: "amount", body: "200"}, fields[1], doc},
	} {
		if sum("boundary-one", parts...) == a {
			t.Errorf("%s did not change the fingerprint", what)
		}
	}
	// The order of one name's values is the request's.
	if sum("x", part{name: "tag", body: "1"}, part{name: "tag", body: "2"}) == sum("x", part{name: "tag", body: "2"}, part{name: "tag", body: "1"}) {
		t.Error("the order of one field's values did not change the fingerprint")
	}
	for what, r := range map[string]Request{
		"no boundary":    {Method: "POST", ContentType: "multipart/form-data", Body: []byte("--x\r\n")},
		"a broken body":  {Method: "POST", ContentType: "multipart/form-data; boundary=x", Body: []byte("--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nno end")},
		"a part unnamed": {Method: "POST", ContentType: "multipart/form-data; boundary=x", Body: []byte("--x\r\nContent-Type: text/plain\r\n\r\nv\r\n--x--\r\n")},
	} {
		_, err := Fingerprint(r)
		var e *idemtype.Error
		if !errors.As(err, &e) || e.Kind != idemtype.KindInvalidRequest {
			t.Errorf("%s: %v; want invalid-request", what, err)
		}
	}
}
