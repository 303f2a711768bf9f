package idem

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// sameHeaders: got holds every name of want, each with its values in
// order, and nothing else; a name without values is present without
// values (nil and empty alike).
func sameHeaders(got, want http.Header) bool {
	return maps.EqualFunc(got, want, slices.Equal[[]string])
}

var headerCases = []http.Header{
	nil,
	{},
	{"Content-Type": {"application/json"}, "Location": {"/payments/pay_1"}},
	{"B": {"2", "3"}, "A": {"1"}, "Empty": {}, "Nil": nil},
	{"X": {"<a href=\"x\">&amp;</a>", "back\\slash", "\b\f\n\r\t\x00\x1f\x7f", "é€😀", "bad \xff\xfe utf-8"}},
	{"Ünïcode-Näme": {""}, "": {"no name"}},
	{"content-type": {"lower case is not coded"}, "Content-Type": {"a", "b"}, "Www-Authenticate": {"Basic"}},
	{"Long": {strings.Repeat("v", 300)}, strings.Repeat("N", 200): {"x"}},
}

// TestHeaders: a block reads back as the headers written, names exactly as
// they were, and a name of HPACK's static table costs one byte.
func TestHeaders(t *testing.T) {
	t.Parallel()
	for _, h := range headerCases {
		b := appendHeaders(nil, h)
		if len(b) > 0 && (b[0] == '{' || b[0] == 'n') {
			t.Errorf("%q: the block begins with %q, which reads as JSON", h, b[0])
		}
		got, err := parseHeaders(b)
		if err != nil || !sameHeaders(got, h.Clone()) {
			t.Errorf("%q: read back %q, %v", h, got, err)
		}
	}
	b := appendHeaders(nil, http.Header{"Content-Type": {"application/json"}, "Location": {"/payments/10000001"}})
	if want := 1 + 1 + 16 + 1 + 1 + 18; len(b) != want {
		t.Errorf("the bench's two headers take %d bytes, want %d: % x", len(b), want, b)
	}
}

// TestHeadersBefore005: the JSON of records stored before migration 005
// reads back, and a malformed block is an error, not headers.
func TestHeadersBefore005(t *testing.T) {
	t.Parallel()
	for _, h := range headerCases {
		j, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseHeaders(j)
		if err != nil {
			t.Fatalf("%s: %v", j, err)
		}
		var want http.Header // invalid UTF-8 is stored replaced
		if err := json.Unmarshal(j, &want); err != nil {
			t.Fatal(err)
		}
		if !maps.EqualFunc(got, want, slices.Equal[[]string]) {
			t.Errorf("%s: read back %q", j, got)
		}
	}
	for _, bad := range []string{"\x01", "\x01\x02", "\x01\x00\x09Name", "\x1f", "\x1f\x05ab", "\x00\x09Name", "\x3e\x00", "{"} {
		if h, err := parseHeaders([]byte(bad)); err == nil {
			t.Errorf("%q read as %q; want an error", bad, h)
		}
	}
}

// FuzzHeaders: any names and values read back as written.
func FuzzHeaders(f *testing.F) {
	f.Add("Content-Type", "application/json", "Location", "/p/1")
	f.Add("<", "\xff\u2028&", "", "\x00")
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string) {
		h := http.Header{n1: {v1, v2}, n2: {v1}}
		got, err := parseHeaders(appendHeaders(nil, h))
		if err != nil || !sameHeaders(got, h.Clone()) {
			t.Errorf("%q: read back %q, %v", h, got, err)
		}
	})
}
