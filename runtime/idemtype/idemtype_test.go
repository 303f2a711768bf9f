package idemtype

import (
	"errors"
	"net/http"
	"reflect"
	"testing"
)

func TestParseScope(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Scope
		ok   bool
	}{
		{"principal", Scope{Kind: ScopePrincipal}, true},
		{"global", Scope{Kind: ScopeGlobal}, true},
		{"header:X-Tenant", Scope{Kind: ScopeHeader, Name: "X-Tenant"}, true},
		{"path:tenant", Scope{Kind: ScopePath, Name: "tenant"}, true},
		{"principal+path:tenant", Scope{Kind: ScopePath, Name: "tenant", Principal: true}, true},
		{"principal+header:X-Tenant", Scope{Kind: ScopeHeader, Name: "X-Tenant", Principal: true}, true},
		{"principal+global", Scope{}, false},
		{"principal+principal", Scope{}, false},
		{"principal+sender:acme", Scope{}, false},
		{"path:", Scope{}, false},
		{"path:a/b", Scope{}, false},
		{"sender:cardnet", Scope{Kind: ScopeSender, Name: "cardnet"}, true},
		{"sender:a.b-c_9", Scope{Kind: ScopeSender, Name: "a.b-c_9"}, true},
		{"", Scope{}, false},
		{"Principal", Scope{}, false},
		{"header", Scope{}, false},
		{"header:", Scope{}, false},
		{"header:X Tenant", Scope{}, false},
		{"header:X:Y", Scope{}, false},
		{"sender:", Scope{}, false},
		{"sender:9lives", Scope{}, false},
		{"sender:" + string(make([]byte, 64)), Scope{}, false},
		{"tenant", Scope{}, false},
	} {
		got, err := ParseScope(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseScope(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok && got.String() != tc.in {
			t.Errorf("ParseScope(%q).String() = %q", tc.in, got.String())
		}
	}
	if s := (Scope{}).String(); s != "principal" {
		t.Errorf("zero Scope is %q, want principal", s)
	}
}

func TestValidNames(t *testing.T) {
	for name, want := range map[string]bool{"X-Tenant": true, "x_t!#$%&'*+.^`|~9": true, "": false, "X Tenant": false, "X:Y": false, "é": false} {
		if ValidHeaderName(name) != want {
			t.Errorf("ValidHeaderName(%q) = %v, want %v", name, !want, want)
		}
	}
	long := "a" + string(make([]byte, 62))
	for i := 1; i < len(long); i++ {
		long = long[:i] + "b" + long[i+1:]
	}
	for name, want := range map[string]bool{"cardnet": true, "A.b-c_9": true, long: true, long + "c": false, "": false, "9a": false, "_a": false, "a b": false, "a/b": false} {
		if ValidName(name) != want {
			t.Errorf("ValidName(%q) = %v, want %v", name, !want, want)
		}
	}
}

// TestParseValues round-trips every value of the string-valued types
// through its parse function and String, and refuses what is not one.
func TestParseValues(t *testing.T) {
	type value interface{ String() string }
	for _, tc := range []struct {
		parse  func(string) (value, error)
		values []value
		bad    []string
	}{
		{func(s string) (value, error) { return ParseKeyFormat(s) }, []value{KeyFormatAny, KeyFormatUUID, KeyFormatRaw}, []string{"", "UUID", "ulid"}},
		{func(s string) (value, error) { return ParseAmbiguous(s) }, []value{AmbiguousResume, AmbiguousStore}, []string{"", "Resume", "retry"}},
		{func(s string) (value, error) { return ParseComplete(s) }, []value{CompleteOnRetry, CompleteBackground}, []string{"", "on_retry", "never"}},
		{func(s string) (value, error) { return ParsePhaseKind(s) }, []value{PhaseLocal, PhaseForeign}, []string{"", "final", "Local"}},
	} {
		for _, v := range tc.values {
			got, err := tc.parse(v.String())
			if err != nil || got != v {
				t.Errorf("parse(%q) = %v, %v; want %v", v.String(), got, err, v)
			}
		}
		for _, s := range tc.bad {
			if got, err := tc.parse(s); err == nil {
				t.Errorf("parse(%q) = %v, want an error", s, got)
			}
		}
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{second(ParseKeyFormat("ulid")), `format "ulid" is not one of any, uuid, raw`},
		{second(ParseAmbiguous("x")), `ambiguous "x" is not one of resume, store`},
		{second(ParseComplete("x")), `complete "x" is not one of on-retry, background`},
		{second(ParsePhaseKind("x")), `phase kind "x" is not one of local, foreign`},
		{second(ParseScope("x")), `"x" is not a scope; use principal, global, header:<Header-Name>, path:<param> or sender:<name> (principal+header:<Header-Name> or principal+path:<param> for both)`},
	} {
		if tc.err == nil || tc.err.Error() != tc.want {
			t.Errorf("error %v, want %s", tc.err, tc.want)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestErrorKinds(t *testing.T) {
	for _, tc := range []struct {
		kind   ErrorKind
		status int
	}{
		{KindMissingKey, http.StatusBadRequest},
		{KindInvalidKey, http.StatusBadRequest},
		{KindInvalidRequest, http.StatusBadRequest},
		{KindMissingScope, http.StatusUnauthorized},
		{KindInvalidScope, http.StatusBadRequest},
		{KindMismatch, http.StatusUnprocessableEntity},
		{KindInFlight, http.StatusConflict},
		{KindNotImplemented, http.StatusNotImplemented},
		{KindFailed, http.StatusInternalServerError},
		{KindUnavailable, http.StatusServiceUnavailable},
		{KindNotStored, http.StatusGone},
		{KindInvalidSignature, http.StatusUnauthorized},
		{ErrorKind("no-such-kind"), http.StatusInternalServerError},
	} {
		if got := tc.kind.Status(); got != tc.status {
			t.Errorf("%s.Status() = %d, want %d", tc.kind, got, tc.status)
		}
		if tc.kind != "no-such-kind" && tc.kind.Title() == "" {
			t.Errorf("%s has no title", tc.kind)
		}
		if got, want := tc.kind.ProblemType(), "urn:idemgen:problem:"+string(tc.kind); got != want {
			t.Errorf("%s.ProblemType() = %q, want %q", tc.kind, got, want)
		}
	}
	if len(kindStatus) != len(kindTitle) {
		t.Errorf("%d kinds have a status and %d a title", len(kindStatus), len(kindTitle))
	}
}

func TestError(t *testing.T) {
	cause := errors.New("conn refused")
	e := &Error{Kind: KindUnavailable, Detail: "store down", Err: cause}
	if got, want := e.Error(), "unavailable: store down: conn refused"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, cause) {
		t.Error("the cause does not unwrap")
	}
	want := Problem{Type: "urn:idemgen:problem:unavailable", Title: KindUnavailable.Title(), Status: 503, Detail: "store down"}
	if got := e.Problem(); got != want {
		t.Errorf("Problem() = %+v, want %+v", got, want)
	}
	if got := (&Error{Kind: KindInFlight}).Error(); got != "in-flight" {
		t.Errorf("Error() without detail = %q", got)
	}
}

func TestHeaders(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		credential, framing, no bool
	}{
		{"Set-Cookie", true, false, true},
		{"set-cookie", true, false, true},
		{"WWW-Authenticate", true, false, true},
		{"authorization", true, false, true},
		{"Proxy-Authorization", true, false, true},
		{"Proxy-Authenticate", true, false, true},
		{"Cookie", true, false, true},
		{"Content-Length", false, true, true},
		{"TRANSFER-ENCODING", false, true, true},
		{"content-encoding", false, true, true},
		{"Content-Type", false, false, false},
		{"Location", false, false, false},
	} {
		if CredentialHeader(tc.name) != tc.credential || FramingHeader(tc.name) != tc.framing || NeverStored(tc.name) != tc.no {
			t.Errorf("%s: credential %v framing %v never stored %v; want %v %v %v", tc.name,
				CredentialHeader(tc.name), FramingHeader(tc.name), NeverStored(tc.name), tc.credential, tc.framing, tc.no)
		}
	}
	h := DefaultReplayHeaders()
	h[0] = "X"
	if DefaultReplayHeaders()[0] != "Content-Type" {
		t.Error("DefaultReplayHeaders shares its slice")
	}
}

func TestParsePointer(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{"/id", []string{"id"}, ""},
		{"/data/object/id", []string{"data", "object", "id"}, ""},
		{"/", []string{""}, ""},
		{"//", []string{"", ""}, ""},
		{"/a~1b", []string{"a/b"}, ""},
		{"/m~0n", []string{"m~n"}, ""},
		{"/~01", []string{"~1"}, ""}, // ~0 first, then a plain 1: not a slash
		{"/~10", []string{"/0"}, ""},
		{"/~0~1", []string{"~/"}, ""},
		{"/items/0", []string{"items", "0"}, ""},
		{"/~", []string{"~"}, ""},   // not an escape: kept as it is
		{"/~2", []string{"~2"}, ""}, // idem
		{"/é", []string{"é"}, ""},
		{"", nil, "empty JSON Pointer"},
		{"id", nil, `JSON Pointer "id" must start with /`},
		{"#/id", nil, `JSON Pointer "#/id" must start with /`},
	} {
		got, err := ParsePointer(tc.in)
		switch {
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("ParsePointer(%q) error %v, want %s", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || !reflect.DeepEqual(got, tc.want)):
			t.Errorf("ParsePointer(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		if (CheckPointer(tc.in) == nil) != (tc.err == "") {
			t.Errorf("CheckPointer(%q) = %v", tc.in, CheckPointer(tc.in))
		}
		for _, tok := range got {
			if back := UnescapePointerToken(EscapePointerToken(tok)); back != tok {
				t.Errorf("token %q escapes to %q and back to %q", tok, EscapePointerToken(tok), back)
			}
		}
	}
	if !errors.Is(CheckPointer(""), ErrEmptyPointer) {
		t.Error("CheckPointer(\"\") is not ErrEmptyPointer")
	}
	for name, tok := range map[string]string{"a/b": "a~1b", "m~n": "m~0n", "~/": "~0~1", "~1": "~01", "plain": "plain", "": ""} {
		if got := EscapePointerToken(name); got != tok {
			t.Errorf("EscapePointerToken(%q) = %q, want %q", name, got, tok)
		}
	}
}

func TestPointerTokenIs(t *testing.T) {
	for _, tc := range []struct {
		tok, name string
	}{
		{"id", "id"}, {"id", "i"}, {"id", "idx"}, {"", ""}, {"", "a"},
		{"a~1b", "a/b"}, {"a~1b", "a~1b"}, {"m~0n", "m~n"}, {"~01", "~1"}, {"~01", "/"},
		{"~", "~"}, {"~2", "~2"}, {"~0", "~0"}, {"~1", "/"}, {"é", "é"},
	} {
		want := UnescapePointerToken(tc.tok) == tc.name
		if got := PointerTokenIs(tc.tok, []byte(tc.name)); got != want {
			t.Errorf("PointerTokenIs(%q, %q) = %v, want %v", tc.tok, tc.name, got, want)
		}
	}
}
