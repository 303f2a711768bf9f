package idem

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestHeaderJSON: appendHeaderJSON writes what json.Marshal writes.
func TestHeaderJSON(t *testing.T) {
	for _, h := range []http.Header{
		nil,
		{},
		{"Content-Type": {"application/json"}, "Location": {"/payments/pay_1"}},
		{"B": {"2", "3"}, "A": {"1"}, "Empty": {}, "Nil": nil},
		{"X": {"<a href=\"x\">&amp;</a>", "back\\slash", "\b\f\n\r\t\x00\x1f\x7f", "é€😀", "\u2028\u2029", "bad \xff\xfe utf-8", "\xe2\x80"}},
		{"Ünïcode-Näme": {""}},
	} {
		want, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendHeaderJSON(nil, h); string(got) != string(want) {
			t.Errorf("%q:\n got %s\nwant %s", h, got, want)
		}
	}
}

// FuzzHeaderJSON compares appendHeaderJSON with json.Marshal on any names
// and values.
func FuzzHeaderJSON(f *testing.F) {
	f.Add("Content-Type", "application/json", "Location", "/p/1")
	f.Add("<", "\xff\u2028&", "", "\x00")
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string) {
		h := http.Header{n1: {v1, v2}, n2: {v1}}
		want, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendHeaderJSON(nil, h); string(got) != string(want) {
			t.Errorf("%q:\n got %s\nwant %s", h, got, want)
		}
	})
}
