package idemhttp

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

func TestParseKey(t *testing.T) {
	uuid := "123e4567-e89b-12d3-a456-426614174000"
	cases := []struct {
		name   string
		values []string
		rule   KeyRule
		want   string
		kind   idemtype.ErrorKind // "" for success
	}{
		{"sf-string", []string{`"abc-123"`}, KeyRule{Required: true}, "abc-123", ""},
		{"sf-string with escapes", []string{`"a\"b\\c"`}, KeyRule{Required: true}, `a"b\c`, ""},
		{"sf-string with space", []string{`"a b"`}, KeyRule{Required: true}, "a b", ""},
		{"bare token", []string{"abc-123"}, KeyRule{Required: true}, "abc-123", ""},
		{"bare uuid (not an sf-token)", []string{uuid}, KeyRule{Required: true, Format: idemtype.KeyFormatUUID}, uuid, ""},
		{"surrounding spaces", []string{"  abc  "}, KeyRule{Required: true}, "abc", ""},
		{"missing, required", nil, KeyRule{Required: true}, "", idemtype.KindMissingKey},
		{"missing, optional", nil, KeyRule{}, "", ""},
		{"empty", []string{""}, KeyRule{Required: true}, "", idemtype.KindInvalidKey},
		{"empty sf-string", []string{`""`}, KeyRule{Required: true}, "", idemtype.KindInvalidKey},
		{"repeated field", []string{"a", "b"}, KeyRule{Required: true}, "", idemtype.KindInvalidKey},
		{"list in one field", []string{`"a", "b"`}, KeyRule{Required: true}, "", idemtype.KindInvalidKey},
		{"control character", []string{"ab\x01c"}, KeyRule{Required: true}, "", idemtype.KindInvalidKey},
		{"tab inside", []string{"a\tb"}, KeyRule{Required: true}, "", idemtype.KindInvalidKey},
		{"non-ASCII", []string{"clé"}, KeyRule{Required: true}, "", idemtype.KindInvalidKey},
		{"unterminated sf-string", []string{`"abc`}, KeyRule{Required: true}, "", idemtype.KindInvalidKey},
		{"sf-string with parameters", []string{`"abc";a=1`}, KeyRule{Required: true}, "", idemtype.KindInvalidKey},
		{"too long", []string{strings.Repeat("k", 256)}, KeyRule{Required: true}, "", idemtype.KindInvalidKey},
		{"at the limit", []string{strings.Repeat("k", 255)}, KeyRule{Required: true}, strings.Repeat("k", 255), ""},
		{"custom limit", []string{"abcdef"}, KeyRule{Required: true, MaxLength: 5}, "", idemtype.KindInvalidKey},
		{"not a uuid", []string{"abc"}, KeyRule{Required: true, Format: idemtype.KeyFormatUUID}, "", idemtype.KindInvalidKey},
		{"custom header", []string{"x"}, KeyRule{Header: "X-Request-Key", Required: true}, "x", ""},
		{"raw: quotes kept", []string{`"dup-7"`}, KeyRule{Required: true, Format: idemtype.KeyFormatRaw}, `"dup-7"`, ""},
		{"raw: spaces", []string{"order 42"}, KeyRule{Required: true, Format: idemtype.KeyFormatRaw}, "order 42", ""},
		{"raw: non-ASCII", []string{"commande-é"}, KeyRule{Required: true, Format: idemtype.KeyFormatRaw}, "commande-é", ""},
		{"raw: commas and backslashes", []string{`a,b\c`}, KeyRule{Required: true, Format: idemtype.KeyFormatRaw}, `a,b\c`, ""},
		{"raw: 255 characters of two bytes", []string{strings.Repeat("é", 255)}, KeyRule{Required: true, Format: idemtype.KeyFormatRaw}, strings.Repeat("é", 255), ""},
		{"raw: 256 characters", []string{strings.Repeat("é", 256)}, KeyRule{Required: true, Format: idemtype.KeyFormatRaw}, "", idemtype.KindInvalidKey},
		{"raw: control character", []string{"ab\x01c"}, KeyRule{Required: true, Format: idemtype.KeyFormatRaw}, "", idemtype.KindInvalidKey},
		{"raw: tab inside", []string{"a\tb"}, KeyRule{Required: true, Format: idemtype.KeyFormatRaw}, "", idemtype.KindInvalidKey},
		{"raw: invalid UTF-8", []string{"a\xffb"}, KeyRule{Required: true, Format: idemtype.KeyFormatRaw}, "", idemtype.KindInvalidKey},
		{"raw: a C1 control", []string{"a\u0085b"}, KeyRule{Required: true, Format: idemtype.KeyFormatRaw}, "", idemtype.KindInvalidKey},
		{"raw: empty", []string{""}, KeyRule{Required: true, Format: idemtype.KeyFormatRaw}, "", idemtype.KindInvalidKey},
		{"under the minimum length", []string{"order-42"}, KeyRule{Required: true, MinLength: 16}, "", idemtype.KindInvalidKey},
		{"at the minimum length", []string{"0123456789abcdef"}, KeyRule{Required: true, MinLength: 16}, "0123456789abcdef", ""},
		{"raw: under the minimum length in characters", []string{"éééé"}, KeyRule{Required: true, MinLength: 5, Format: idemtype.KeyFormatRaw}, "", idemtype.KindInvalidKey},
		{"raw: an emoji sequence with joiners", []string{"family-👨\u200d👩\u200d👧"}, KeyRule{Required: true, Format: idemtype.KeyFormatRaw}, "family-👨\u200d👩\u200d👧", ""},
		{"raw: a no-break space", []string{"a\u00a0b"}, KeyRule{Required: true, Format: idemtype.KeyFormatRaw}, "a\u00a0b", ""},
		{"raw: a bidirectional override", []string{"abc\u202edef"}, KeyRule{Required: true, Format: idemtype.KeyFormatRaw}, "", idemtype.KindInvalidKey},
		{"raw: the replacement character", []string{"a\ufffdb"}, KeyRule{Required: true, Format: idemtype.KeyFormatRaw}, "", idemtype.KindInvalidKey},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			name := tc.rule.Header
			if name == "" {
				name = idemtype.DefaultKeyHeader
			}
			for _, v := range tc.values {
				h.Add(name, v)
			}
			got, err := ParseKey(h, tc.rule)
			if tc.kind == "" {
				if err != nil || got != tc.want {
					t.Fatalf("ParseKey = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			var e *idemtype.Error
			if !errors.As(err, &e) || e.Kind != tc.kind {
				t.Fatalf("ParseKey = %q, %v; want error of kind %s", got, err, tc.kind)
			}
			if e.Detail == "" {
				t.Errorf("error %v has no detail for the client", err)
			}
			if tc.rule.Format == idemtype.KeyFormatRaw && tc.kind == idemtype.KindInvalidKey && !strings.Contains(e.Detail, "raw") && !strings.Contains(e.Detail, "minLength") {
				t.Errorf("detail %q does not name the rule (format raw)", e.Detail)
			}
		})
	}
}

// TestQuotedAndBareKeys: "dup-7" and dup-7 are one key in the default
// format, which reads the header as an RFC 8941 string, and two keys in the
// raw format, which takes the value as it was sent.
func TestQuotedAndBareKeys(t *testing.T) {
	for _, tc := range []struct {
		format idemtype.KeyFormat
		same   bool
	}{{idemtype.KeyFormatAny, true}, {idemtype.KeyFormatRaw, false}} {
		rule := KeyRule{Required: true, Format: tc.format}
		quoted, err1 := ParseKey(http.Header{"Idempotency-Key": {`"dup-7"`}}, rule)
		bare, err2 := ParseKey(http.Header{"Idempotency-Key": {`dup-7`}}, rule)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v, %v", tc.format, err1, err2)
		}
		if (quoted == bare) != tc.same {
			t.Errorf("format %s: %q and %q; want the same key: %t", tc.format, quoted, bare, tc.same)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, "abc", `"a\"b"`, "", `"`, "a,b", "\x00", "123e4567-e89b-12d3-a456-426614174000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{idemtype.DefaultKeyHeader: {v}}
		key, err := ParseKey(h, KeyRule{Required: true})
		if err != nil {
			var e *idemtype.Error
			if !errors.As(err, &e) || e.Kind != idemtype.KindInvalidKey {
				t.Fatalf("error %v is not an invalid-key error", err)
			}
			return
		}
		if key == "" || len(key) > idemtype.DefaultMaxKeyLength {
			t.Fatalf("accepted key %q of length %d", key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("accepted key %q with byte 0x%02x", key, key[i])
			}
		}
	})
}

func TestBodyKey(t *testing.T) {
	rule := KeyRule{Pointer: "/id", Required: true}
	cases := []struct {
		name string
		body string
		rule KeyRule
		want string
		kind idemtype.ErrorKind // "" for success
	}{
		{"string", `{"id":"evt_1","type":"charge.succeeded"}`, rule, "evt_1", ""},
		{"integer", `{"id":12345}`, rule, "12345", ""},
		{"minus zero is zero", `{"id":-0}`, rule, "0", ""},
		{"negative integer", `{"id":-7}`, rule, "-7", ""},
		{"nested", `{"data":{"object":{"id":"ch_1"}}}`, KeyRule{Pointer: "/data/object/id"}, "ch_1", ""},
		{"escaped pointer", `{"a/b":{"~c":"k"}}`, KeyRule{Pointer: "/a~1b/~0c"}, "k", ""},
		{"spaces inside", `{"id":"a b"}`, rule, "a b", ""},
		{"uuid", `{"id":"123e4567-e89b-12d3-a456-426614174000"}`, KeyRule{Pointer: "/id", Format: idemtype.KeyFormatUUID}, "123e4567-e89b-12d3-a456-426614174000", ""},
		{"missing member", `{"type":"x"}`, rule, "", idemtype.KindMissingKey},
		{"null", `{"id":null}`, rule, "", idemtype.KindMissingKey},
		{"parent not an object", `{"data":"x"}`, KeyRule{Pointer: "/data/id"}, "", idemtype.KindMissingKey},
		{"empty body", ``, rule, "", idemtype.KindMissingKey},
		{"empty string", `{"id":""}`, rule, "", idemtype.KindInvalidKey},
		{"fraction", `{"id":1.5}`, rule, "", idemtype.KindInvalidKey},
		{"integer with a fraction part", `{"id":1.0}`, rule, "", idemtype.KindInvalidKey},
		{"exponent", `{"id":1e3}`, rule, "", idemtype.KindInvalidKey},
		{"object", `{"id":{"v":"x"}}`, rule, "", idemtype.KindInvalidKey},
		{"boolean", `{"id":true}`, rule, "", idemtype.KindInvalidKey},
		{"control character", `{"id":"a\u0001b"}`, rule, "", idemtype.KindInvalidKey},
		{"non-ASCII", `{"id":"clé"}`, rule, "", idemtype.KindInvalidKey},
		{"too long", `{"id":"` + strings.Repeat("k", 256) + `"}`, rule, "", idemtype.KindInvalidKey},
		{"custom limit", `{"id":"abcdef"}`, KeyRule{Pointer: "/id", MaxLength: 5}, "", idemtype.KindInvalidKey},
		{"not a uuid", `{"id":"abc"}`, KeyRule{Pointer: "/id", Format: idemtype.KeyFormatUUID}, "", idemtype.KindInvalidKey},
		{"malformed JSON", `{"id":`, rule, "", idemtype.KindInvalidRequest},
		{"duplicate member", `{"id":"a","id":"b"}`, rule, "", idemtype.KindInvalidRequest},
		{"NUL in the key", `{"id":"a\u0000"}`, rule, "", idemtype.KindInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BodyKey([]byte(tc.body), tc.rule)
			if tc.kind == "" {
				if err != nil || got != tc.want {
					t.Fatalf("BodyKey = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			var e *idemtype.Error
			if !errors.As(err, &e) || e.Kind != tc.kind {
				t.Fatalf("BodyKey = %q, %v; want error of kind %s", got, err, tc.kind)
			}
			if e.Detail == "" {
				t.Errorf("error %v has no detail for the client", err)
			}
			if tc.rule.Format == idemtype.KeyFormatRaw && tc.kind == idemtype.KindInvalidKey && !strings.Contains(e.Detail, "raw") && !strings.Contains(e.Detail, "minLength") {
				t.Errorf("detail %q does not name the rule (format raw)", e.Detail)
			}
		})
	}
}

// TestRawBodyKeysDoNotCollide: in the raw format, a body key with a lone
// surrogate escape (which decodes to U+FFFD) is refused, so that
// "a\ud800", "a\udbff" and "a\ufffd" are not one key.
func TestRawBodyKeysDoNotCollide(t *testing.T) {
	rule := KeyRule{Pointer: "/id", Required: true, Format: idemtype.KeyFormatRaw}
	for _, body := range []string{`{"id":"a\ud800"}`, `{"id":"a\udbff"}`, `{"id":"a\ufffd"}`} {
		if key, err := BodyKey([]byte(body), rule); err == nil {
			t.Errorf("%s: key %q; want it refused", body, key)
		}
	}
	if key, err := BodyKey([]byte(`{"id":"evt \ud83d\ude00"}`), rule); err != nil || key != "evt 😀" {
		t.Errorf("a surrogate pair: %q, %v; want the emoji", key, err)
	}
}

// FuzzBodyKey: no body makes BodyKey panic; an accepted key follows the
// same rules as a header's; the outcome is the reference implementation's.
func FuzzBodyKey(f *testing.F) {
	for _, s := range []string{`{"id":"evt_1"}`, `{"id":12}`, `{"id":-0}`, `{"id":1.0}`, `{"id":null}`, `[]`, `"x"`, `{"id":"\u0000"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkBodyKey(t, body, KeyRule{Pointer: "/id", Required: true}) // the same as the implementation it replaced
		key, err := BodyKey(body, KeyRule{Pointer: "/id", Required: true})
		if err != nil {
			var e *idemtype.Error
			if !errors.As(err, &e) || (e.Kind != idemtype.KindInvalidKey && e.Kind != idemtype.KindMissingKey && e.Kind != idemtype.KindInvalidRequest) {
				t.Fatalf("error %v is not a key or body error", err)
			}
			return
		}
		if key == "" || len(key) > idemtype.DefaultMaxKeyLength {
			t.Fatalf("accepted key %q of length %d", key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("accepted key %q with byte 0x%02x", key, key[i])
			}
		}
	})
}
