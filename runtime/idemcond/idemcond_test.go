package idemcond_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemcond"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// status is err's status as an *idemcond.Error; 0 for nil, -1 for another
// error.
func status(err error) int {
	var e *idemcond.Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.Status
	}
	return -1
}

// TestParse: If-Match and If-None-Match as RFC 9110 writes them (*, a list
// of entity tags with optional whitespace and empty elements, an empty
// tag, obs-text) parse; what does not is a 400 whose detail says what to
// send: a tag without its double quotes, a weak tag in If-Match (strong
// comparison), w/ in lower case, * mixed with tags, an unterminated tag,
// a space inside one, tags not separated by commas, a list of nothing.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		ifMatch, ifNoneMatch string
		status               int
		detail               string // in the 400's detail
	}{
		{"", "", 0, ""},
		{"*", "", 0, ""},
		{" \t*\t ", "", 0, ""},
		{`"1"`, "", 0, ""},
		{`"1", "2",,"3" `, "", 0, ""},
		{`""`, "", 0, ""},
		{"\"caf\xc3\xa9\"", "", 0, ""},
		{"", `W/"1", "2"`, 0, ""},
		{"", "*", 0, ""},
		{"1", "", 400, `double quotes included (If-Match: "7", not If-Match: 7)`},
		{"", "abc", 400, "If-None-Match: abc is not a list of entity tags"},
		{`W/"1"`, "", 400, "send the ETag this API returned, without W/"},
		{`"1", W/"2"`, "", 400, "weak entity tag"},
		{`w/"1"`, "", 400, "a weak tag begins with W/, upper case"},
		{`"1", *`, "", 400, "* stands alone"},
		{"", `*, "1"`, 400, "* stands alone"},
		{`"1`, "", 400, "without its closing double quote"},
		{`"a b"`, "", 400, "a space or a control character"},
		{"\"a\x01\"", "", 400, "a space or a control character"},
		{`"1" "2"`, "", 400, "separated by commas"},
		{`"1";"2"`, "", 400, "separated by commas"},
		{" , ,", "", 400, "holds no entity tag"},
	} {
		_, err := idemcond.Parse(c.ifMatch, c.ifNoneMatch)
		if got := status(err); got != c.status {
			t.Errorf("Parse(%q, %q): %v; want status %d", c.ifMatch, c.ifNoneMatch, err, c.status)
			continue
		}
		if c.detail != "" && !strings.Contains(err.(*idemcond.Error).Detail, c.detail) {
			t.Errorf("Parse(%q, %q): detail %q; want it to say %q", c.ifMatch, c.ifNoneMatch, err.(*idemcond.Error).Detail, c.detail)
		}
	}
}

// TestCheck: If-Match compares strongly and needs the resource to exist
// (* any version of it), If-None-Match compares weakly and * holds only
// for a resource that does not exist, If-Match is evaluated first; a
// precondition that is false is a 412 whose detail names the current ETag.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		ifMatch, ifNoneMatch string
		current              idemcond.Version
		exists               bool
		status               int
	}{
		{"", "", 1, true, 0},
		{"", "", 0, false, 0},
		{`"1"`, "", 1, true, 0},
		{`"1"`, "", 2, true, 412},
		{`"1"`, "", 0, false, 412},
		{`"3", "2"`, "", 2, true, 0},
		{`"02"`, "", 2, true, 412},
		{"*", "", 5, true, 0},
		{"*", "", 0, false, 412},
		{"", "*", 0, false, 0},
		{"", "*", 1, true, 412},
		{"", `W/"2"`, 2, true, 412},
		{"", `"2"`, 2, true, 412},
		{"", `"2"`, 3, true, 0},
		{"", `"2"`, 0, false, 0},
		{`"2"`, `"2"`, 2, true, 412},
		{`"1"`, "*", 0, false, 412},
	} {
		p, err := idemcond.Parse(c.ifMatch, c.ifNoneMatch)
		if err != nil {
			t.Fatal(err)
		}
		err = p.Check(c.current, c.exists)
		if got := status(err); got != c.status {
			t.Errorf("If-Match %q, If-None-Match %q against %s (exists %v): %v; want status %d",
				c.ifMatch, c.ifNoneMatch, c.current.ETag(), c.exists, err, c.status)
		}
		if got := status(err); got == 412 && c.exists && !strings.Contains(err.Error(), c.current.ETag()) {
			t.Errorf("If-Match %q, If-None-Match %q: %v; want the current ETag %s named", c.ifMatch, c.ifNoneMatch, err, c.current.ETag())
		}
	}
}

// TestETag: a version's ETag is strong and quoted, and If-Match with it
// holds for that version only.
func TestETag(t *testing.T) {
	if got := idemcond.Version(42).ETag(); got != `"42"` {
		t.Fatalf("ETag %s; want \"42\"", got)
	}
	p, err := idemcond.Parse(idemcond.Version(42).ETag(), "")
	if err != nil || p.Check(42, true) != nil || p.Check(43, true) == nil {
		t.Fatalf("If-Match with the ETag of 42: %v, %v, %v", err, p.Check(42, true), p.Check(43, true))
	}
}

// TestParseHeaderJoinsLines: a header sent on two lines is one list.
func TestParseHeaderJoinsLines(t *testing.T) {
	h := http.Header{}
	h.Add("If-Match", `"1"`)
	h.Add("If-Match", `"2"`)
	p, err := idemcond.ParseHeader(h)
	if err != nil || p.Check(2, true) != nil || p.Check(3, true) == nil {
		t.Fatalf("If-Match on two lines: %v, %v, %v", err, p.Check(2, true), p.Check(3, true))
	}
}

// TestErrorProblem: each refusal is a problem+json document of the type
// urn:idemgen:problem:<kind>, with its status, a title and the detail.
func TestErrorProblem(t *testing.T) {
	for status, kind := range map[int]string{400: "invalid-precondition", 404: "not-found", 412: "precondition-failed", 428: "precondition-required"} {
		e := &idemcond.Error{Status: status, Detail: "what to do"}
		resp := e.Response()
		var p idemtype.Problem
		if err := json.Unmarshal(resp.Body, &p); err != nil {
			t.Fatal(err)
		}
		want := idemtype.Problem{Type: "urn:idemgen:problem:" + kind, Title: p.Title, Status: status, Detail: "what to do"}
		if resp.Status != status || resp.Header.Get("Content-Type") != "application/problem+json" || p != want || p.Title == "" {
			t.Errorf("%d: %d %v %+v; want %+v with a title", status, resp.Status, resp.Header, p, want)
		}
	}
}

// TestRequire: the middleware answers a request without the required
// header 428 and a malformed precondition 400, each a problem that says
// what to send, before the handler (the router's binding) sees it; it
// passes a request with the header on, its lines joined into one.
func TestRequire(t *testing.T) {
	var seen []string
	h := idemcond.Require("if-match")(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Values("If-Match")
		w.WriteHeader(204)
	}))
	for _, c := range []struct {
		header [][2]string
		status int
		detail string
	}{
		{nil, 428, "this operation requires If-Match: GET the resource"},
		{[][2]string{{"If-None-Match", "*"}}, 428, "requires If-Match"},
		{[][2]string{{"If-Match", ""}}, 428, "requires If-Match"},
		{[][2]string{{"If-Match", "7"}}, 400, "double quotes included"},
		{[][2]string{{"If-Match", `"7"`}, {"If-None-Match", `W"8"`}}, 400, "If-None-Match"},
		{[][2]string{{"If-Match", `"7"`}}, 204, ""},
		{[][2]string{{"If-Match", `"7"`}, {"If-Match", `"8"`}}, 204, ""},
	} {
		seen = nil
		req := httptest.NewRequest("PUT", "/orders/1/shipping", nil)
		for _, kv := range c.header {
			req.Header.Add(kv[0], kv[1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("%v: %d %s; want %d", c.header, rec.Code, rec.Body, c.status)
			continue
		}
		if c.status == 204 {
			if len(seen) != 1 {
				t.Errorf("%v: the handler saw If-Match %q; want one line", c.header, seen)
			}
			continue
		}
		var p idemtype.Problem
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Header().Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(p.Detail, c.detail) || seen != nil {
			t.Errorf("%v: %s %s (handler saw %q); want a problem saying %q, the handler not called", c.header, rec.Header(), rec.Body, seen, c.detail)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Require(\"If-Range\") did not panic")
		}
	}()
	idemcond.Require("If-Range")
}
