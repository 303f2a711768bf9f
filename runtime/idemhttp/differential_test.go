package idemhttp

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// The tests here hold the single-pass implementation of canonical JSON,
// fingerprints and body keys to the one it replaced (reference_test.go):
// for every input, the same bytes or the same error (message and kind).

// sameOutcome fails t unless got and want are the same bytes, or errors
// with the same message and the same idemtype.Error kind.
func sameOutcome(t *testing.T, what string, got []byte, gotErr error, want []byte, wantErr error) {
	t.Helper()
	switch {
	case gotErr == nil && wantErr == nil:
		if !bytes.Equal(got, want) {
			t.Fatalf("%s:\n got %q\nwant %q (reference)", what, got, want)
		}
	case gotErr == nil || wantErr == nil:
		t.Fatalf("%s:\n got %q, %v\nwant %q, %v (reference)", what, got, gotErr, want, wantErr)
	default:
		if gotErr.Error() != wantErr.Error() || errKind(gotErr) != errKind(wantErr) {
			t.Fatalf("%s:\n got error %v (%s)\nwant error %v (%s, reference)", what, gotErr, errKind(gotErr), wantErr, errKind(wantErr))
		}
	}
}

func errKind(err error) idemtype.ErrorKind {
	var e *idemtype.Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return "(not an idemtype.Error)"
}

func checkCanonicalJSON(t *testing.T, body []byte, exclude []string) {
	t.Helper()
	got, err := CanonicalJSON(body, exclude)
	want, wantErr := refCanonicalJSON(body, exclude)
	sameOutcome(t, "CanonicalJSON("+strconv.Quote(string(body))+", "+strings.Join(exclude, " ")+")", got, err, want, wantErr)
}

func checkBodyKey(t *testing.T, body []byte, rule KeyRule) {
	t.Helper()
	got, err := BodyKey(body, rule)
	want, wantErr := refBodyKey(body, rule)
	sameOutcome(t, "BodyKey("+strconv.Quote(string(body))+", "+rule.Pointer+")", []byte(got), err, []byte(want), wantErr)
}

func checkFingerprint(t *testing.T, r Request) {
	t.Helper()
	got, err := Fingerprint(r)
	want, wantErr := refFingerprint(r)
	sameOutcome(t, "Fingerprint of "+strconv.Quote(string(r.Body)), got, err, want, wantErr)
	body, kind, err := CanonicalBody(r.ContentType, r.Body, r.Exclude)
	wantBody, wantKind, wantErr := refCanonicalBody(r.ContentType, r.Body, r.Exclude)
	sameOutcome(t, "CanonicalBody("+r.ContentType+", "+strconv.Quote(string(r.Body))+")", append([]byte(kind+":"), body...), err, append([]byte(wantKind+":"), wantBody...), wantErr)
}

// tricky holds inputs chosen for each rule the reference follows.
var tricky = []string{
	// white space, order, nesting
	``, ` `, "\t\n\r ", `{}`, `[]`, ` { } `, `[ [ ] , { } ]`, `{"b":{"d":1,"c":2},"a":[3,{"f":4,"e":5}]}`,
	`{"":1,"a":2," ":3}`, `{"é":1,"e":2,"z":3}`, `{"\u00e9":1,"é":2}`, `{"a\u0000":1}`, `{"\ud83d\ude00":1,"😀":2}`,
	`{"b":1,"a":2,"b":3}`, `{"a":1,"b":{"c":1,"c":2},"a":3}`, `{"a":{"x":1,"x":2},"a":3}`, `{"a":1,"a":2,`, `{"a":1,"a"`,
	`{"a":1,"a":2}x`, `[{"a":1,"a":2}]]`, `{"a":[1,2,}],"a":1}`, `{"z":1,"a":2,"a":[`, `{"a":"\u0000","a":1}`,
	// strings
	`"\u00e9\n\t\b\f\r\/\\\"\u001f\u007f\u2028\u2029 "`, "\"\u2028\u2029\u2027\u202a\"", `"\ud800"`, `"\udc00"`, `"\ud800\ud800"`,
	`"\ud800\udc00"`, `"\udbff\udfff"`, `"\ud800x"`, `"\ud800\u0041"`, `"\ud800\"`, `"\ud800\u"`, `"\uDC00\uD800"`, `"\u0000"`,
	`"a\u0000b"`, "\"a\x00\"", "\"a\x1f\"", "\"\x7f\"", `"<&>"`, `"\x"`, `"\u12"`, `"\u12g4"`, `"abc`, `"\`, `"\u`, `"`, "\"\xff\"",
	"\"\xed\xa0\x80\"", `"\'"`,
	// numbers
	`0`, `-0`, `-0.0`, `0.000`, `0e10`, `-0e-10`, `1`, `10`, `100`, `1e2`, `1E2`, `1e+2`, `1e-2`, `1.0`, `1.50`, `15e-1`, `0.15e1`,
	`123456789012345678901234567890`, `1e20`, `1e21`, `1e-1`, `100000000000000000000`, `1000000000000000000000`,
	`1e1073741824`, `1e1073741825`, `1e-1073741824`, `1e-1073741825`, `0e99999999999`, `-0e99999999999`, `1e00000000000000000000000001`,
	`1.5e1073741824`, `-12.3400e-5`, `00`, `01`, `-01`, `1.`, `1.e5`, `.5`, `+1`, `-`, `-x`, `1e`, `1e+`, `1ex`, `1x`, `1 2`, `[01]`,
	`[1.]`, `[-]`, `[1e]`, `{"a":01}`, `{"a":1.5.3}`, `[1,2,3,]`, `NaN`, `Infinity`, `-Infinity`,
	// literals
	`true`, `false`, `null`, `tru`, `trux`, `nul`, `nulx`, `fals`, `falsy`, `[truex]`, `{"a":nulll}`, `t`, `n`, `f`,
	// token errors in every state
	`]`, `}`, `:`, `,`, `[}`, `[1}`, `{]`, `{"a":1]`, `{,}`, `{:}`, `{1:2}`, `{[]:1}`, `{"a" 1}`, `{"a"}`, `{"a",1}`, `{"a"::1}`,
	`{"a":}`, `{"a":,}`, `{"a":]}`, `{"a":1,}`, `{"a":1,,}`, `{"a":1 "b":2}`, `{"a":1:}`, `{"a":1[}`, `{"a":1,[}`, `{"a":1,:}`,
	`[,]`, `[,1]`, `[1,,2]`, `[1 2]`, `[1:2]`, `[1,]`, `[1[]]`, `[1{}]`, `[1,:]`, `["a" "b"]`, `[:`, `{`, `[`, `{"a"`, `{"a":`,
	`{"a":1`, `{"a":1,`, `[1`, `[1,`, `{"a":[`, `x`, `'a'`, `{'a':1}`, "\x00", "[\x00]", "{\x00}", `[é]`, `{é:1}`, "[1]\x00",
	`{"a":1} {}`, `{"a":1}x`, `[] []`, "[]\n\t ", `"x" "y"`, `1 x`,
}

func TestCanonicalJSONMatchesReference(t *testing.T) {
	excludes := [][]string{nil, {"/a"}, {"/a", "/b/0"}, {"/0"}, {"/a/0", "/a/0"}, {"/a/1", "/a/0/x"}, {""}, {"a"}, {"/a", ""}}
	for _, in := range tricky {
		for _, ex := range excludes {
			checkCanonicalJSON(t, []byte(in), ex)
		}
	}
	deep := func(n int, open, close string) string { return strings.Repeat(open, n) + strings.Repeat(close, n) }
	for _, n := range []int{MaxJSONDepth, MaxJSONDepth + 1, MaxJSONDepth + 2, 200} {
		for _, in := range []string{deep(n, "[", "]"), deep(n, `{"a":`, "}"), deep(n, "[", ""), deep(n, `{"a":`, ""),
			deep(n, "[", "") + "1", deep(n, "[", "") + ",", deep(n, `{"a":`, "") + "x", deep(n, `{"a":`, "") + `{"a" 1`,
			`{"a":1,"a":` + deep(n, "[", "]") + "}", deep(n-1, `[{"a":1,"a":2,"b":`, "") + "x"} {
			checkCanonicalJSON(t, []byte(in), nil)
			checkCanonicalJSON(t, []byte(in), []string{"/a", "/0"})
		}
	}
}

func TestCanonicalJSONExcludeMatchesReference(t *testing.T) {
	body := `{"amount":5,"client_ts":"now","metadata":{"trace_id":"t1","k":"v"},"a/b":1,"m~n":2,"~1":3,"~":4,"":5,` +
		`"items":[{"x":1},{"x":2},{"x":3,"y":[0,1,2,3]}],"m\u002fx":6,"arr":[[0,1],[2,3]],"\u00e9":7}`
	pointers := []string{"/client_ts", "/metadata/trace_id", "/a~1b", "/m~0n", "/~01", "/~", "/~2", "/", "//", "/items/0",
		"/items/1", "/items/2/y/1", "/items/0/x", "/items/00", "/items/-1", "/items/+1", "/items/-", "/items/3", "/items/99999999999999999999",
		"/absent/deep", "/amount/0", "/m~1x", "/arr/0/1", "/arr/1", "/arr/0", "/é", "/items/2/y/0", "/items/2/y/3",
		"/items/*", "/items/*/x", "/items/*/y/*", "/items/*/y/1", "/arr/*/0", "/arr/*/*", "/*", "/metadata/*", "/items/**"}
	for _, p := range pointers {
		checkCanonicalJSON(t, []byte(body), []string{p})
	}
	rng := rand.New(rand.NewPCG(8, 3))
	for range 3000 {
		ex := make([]string, 1+rng.IntN(5))
		for i := range ex {
			ex[i] = pointers[rng.IntN(len(pointers))]
		}
		checkCanonicalJSON(t, []byte(body), ex)
	}
}

func TestBodyKeyMatchesReference(t *testing.T) {
	for _, in := range append(tricky, `{"id":"evt_1"}`, `{"id":12}`, `{"id":-0}`, `{"id":1.0}`, `{"id":null}`, `{"id":"\u00e9"}`,
		`{"id":"a\"b"}`, `{"id":{"id":1}}`, `{"x":{"id":1},"id":[1]}`, `{"i\u0064":"k"}`, `{"id":true}`, `{"id":false}`, `{"id":""}`,
		`{"data":{"object":{"id":"ch_1"}}}`, `{"data":[{"object":1}]}`, `{"data":{"object":{"id":2e3}}}`, `{"data":"x"}`,
		` { "id" : "k" , "b" : [ { } ] } `, `{"b":[{"id":"x"}],"id":"y"}`, `{"id":"`+strings.Repeat("k", 256)+`"}`) {
		for _, ptr := range []string{"/id", "/data/object/id", "/data/0", "/", "", "id", "/i~1d", "/a/b/c"} {
			checkBodyKey(t, []byte(in), KeyRule{Pointer: ptr})
			checkBodyKey(t, []byte(in), KeyRule{Pointer: ptr, Format: idemtype.KeyFormatUUID, MaxLength: 5})
		}
	}
}

func TestFingerprintMatchesReference(t *testing.T) {
	base := Request{
		Method: "post", Route: "/accounts/{id}/payments", PathParams: map[string]string{"id": "a1", "b": "x/y", "": ""},
		Query:  url.Values{"dry": {"false"}, "a b": {"1", "2", "é&=+%"}, "empty": {}, "z~-._": {""}},
		Header: http.Header{"X-Account": {"acc"}, "X-Other": {"1", "2"}}, HeaderNames: []string{"x-account", "X-Other", "x-absent"},
		ContentType: "application/json; charset=utf-8", Body: []byte(`{"amount":100,"currency":"EUR","client_ts":"t1"}`),
		Exclude: []string{"/client_ts"},
	}
	for _, ct := range []string{"", "application/json", "Application/JSON", "application/json;charset=utf-8", "application/json; charset=UTF-8",
		"application/json ; charset=utf-8", "application/problem+json", "application/x-www-form-urlencoded", "text/plain", "text/",
		"/json", "application/json;", "application/json; charset", "application/json/x", "bad type", "application/json; a=b; c=d"} {
		for _, body := range []string{"", "  ", `{"amount":1,"client_ts":"x"}`, `{"a":`, "a=1&b=2&client_ts=3&a=0", "a=%zz", "a=\x00", "&", "raw"} {
			r := base
			r.ContentType, r.Body = ct, []byte(body)
			checkFingerprint(t, r)
		}
	}
	r := base
	r.Method, r.PathParams, r.Query, r.HeaderNames = "Pätch", nil, nil, nil
	checkFingerprint(t, r)
	r.Exclude = []string{"nope"}
	checkFingerprint(t, r)
}

// TestRandomJSONMatchesReference compares the two implementations on
// generated bodies: valid ones (random values, names from a small alphabet
// so that members repeat, every kind of escape and number, random white
// space) and the same bodies cut short or with a byte changed.
func TestRandomJSONMatchesReference(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range n {
		body, ptrs := randomJSON(rng)
		checkCanonicalJSON(t, body, ptrs)
		checkCanonicalJSON(t, body, nil)
		checkBodyKey(t, body, KeyRule{Pointer: "/" + randomName(rng)})
		mutated := mutate(rng, body)
		checkCanonicalJSON(t, mutated, ptrs)
		checkBodyKey(t, mutated, KeyRule{Pointer: "/a"})
	}
}

var names = []string{"a", "b", "", "A", "é", "a\u0000", "~", "/", "0", "1"}

func randomName(rng *rand.Rand) string { return names[rng.IntN(len(names))] }

// randomJSON returns a body and pointers into it.
func randomJSON(rng *rand.Rand) ([]byte, []string) {
	var b []byte
	var ptrs []string
	var value func(depth int, path string)
	space := func() {
		for rng.IntN(4) == 0 {
			b = append(b, " \t\r\n"[rng.IntN(4)])
		}
	}
	value = func(depth int, path string) {
		space()
		if rng.IntN(6) == 0 {
			ptrs = append(ptrs, path)
		}
		k := rng.IntN(10) // 0: object, 1: array, else a scalar
		switch {
		case depth == 0:
			k = rng.IntN(3) % 2
		case depth < 3 && rng.IntN(3) == 0:
			k = rng.IntN(2)
		case depth > 4:
			k = 2 + rng.IntN(8)
		}
		switch k {
		case 0:
			b = append(b, '{')
			for i := range rng.IntN(5) {
				if i > 0 {
					b = append(b, ',')
				}
				space()
				name := randomName(rng)
				b = appendRandomString(rng, b, name)
				space()
				b = append(b, ':')
				value(depth+1, path+"/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(name))
			}
			space()
			b = append(b, '}')
		case 1:
			b = append(b, '[')
			for i := range rng.IntN(5) {
				if i > 0 {
					b = append(b, ',')
				}
				value(depth+1, path+"/"+strconv.Itoa(i))
			}
			space()
			b = append(b, ']')
		case 2, 3:
			b = appendRandomString(rng, b, randomText(rng))
		case 4, 5, 6:
			b = append(b, randomNumber(rng)...)
		default:
			b = append(b, []string{"true", "false", "null"}[rng.IntN(3)]...)
		}
		space()
	}
	value(0, "")
	for i, p := range ptrs {
		if p == "" || rng.IntN(5) == 0 {
			ptrs[i] = "/" + randomName(rng) + "/" + strconv.Itoa(rng.IntN(3))
		}
	}
	return b, ptrs
}

func randomText(rng *rand.Rand) string {
	parts := []string{"a", "Z", "é", "😀", "\u2028", "\u2029", "\ufffd", "\x7f", "<", "&", " ", "\"", "\\", "\n", "\x01", "/", "\ud7ff"}
	var s strings.Builder
	for range rng.IntN(6) {
		s.WriteString(parts[rng.IntN(len(parts))])
	}
	return s.String()
}

// appendRandomString writes s as a JSON string, each character either as
// is (where JSON allows) or escaped one of the ways JSON allows, with now
// and then a lone or reversed surrogate.
func appendRandomString(rng *rand.Rand, b []byte, s string) []byte {
	b = append(b, '"')
	for _, r := range s {
		switch {
		case rng.IntN(8) == 0:
			b = append(b, []string{`\ud800`, `\udc00`, `\ud800\ud800`, `\udfff\ud800`, `\uD83D\uDE00`}[rng.IntN(5)]...)
			fallthrough
		case r < 0x20 || r == '"' || r == '\\' || rng.IntN(3) == 0:
			if r > 0xffff {
				hi, lo := 0xd800+((r-0x10000)>>10), 0xdc00+((r-0x10000)&0x3ff)
				b = append(b, `\u`+strconv.FormatInt(int64(hi), 16)+`\u`+strconv.FormatInt(int64(lo), 16)...)
				continue
			}
			if short := map[rune]string{'"': `\"`, '\\': `\\`, '/': `\/`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}[r]; short != "" && rng.IntN(2) == 0 {
				b = append(b, short...)
				continue
			}
			h := strconv.FormatInt(int64(r), 16)
			if rng.IntN(2) == 0 {
				h = strings.ToUpper(h)
			}
			b = append(b, `\u`+strings.Repeat("0", 4-len(h))+h...)
		default:
			b = append(b, string(r)...)
		}
	}
	return append(b, '"')
}

func randomNumber(rng *rand.Rand) string {
	var s strings.Builder
	if rng.IntN(3) == 0 {
		s.WriteByte('-')
	}
	digits := func(n int) {
		for range n {
			s.WriteByte("0000123456789"[rng.IntN(13)])
		}
	}
	if rng.IntN(3) == 0 {
		s.WriteByte('0')
	} else {
		s.WriteByte("123456789"[rng.IntN(9)])
		digits(rng.IntN(25))
	}
	if rng.IntN(2) == 0 {
		s.WriteByte('.')
		digits(1 + rng.IntN(25))
	}
	if rng.IntN(2) == 0 {
		s.WriteByte("eE"[rng.IntN(2)])
		if sign := rng.IntN(3); sign < 2 {
			s.WriteByte("+-"[sign])
		}
		if rng.IntN(10) == 0 {
			s.WriteString([]string{"1073741824", "1073741825", "00000000000000000000000000001", "99999999999999999999"}[rng.IntN(4)])
		} else {
			digits(1 + rng.IntN(3))
		}
	}
	return s.String()
}

// mutate cuts b short, or changes, inserts or removes a byte.
func mutate(rng *rand.Rand, b []byte) []byte {
	b = bytes.Clone(b)
	if len(b) == 0 {
		return []byte{"{[]}\",: x\\"[rng.IntN(9)]}
	}
	i := rng.IntN(len(b))
	const alphabet = "{}[],:\" \\0-.eE+tfnux\x00\x01\xff\xe2"
	c := alphabet[rng.IntN(len(alphabet))]
	switch rng.IntN(4) {
	case 0:
		return b[:i]
	case 1:
		b[i] = c
		return b
	case 2:
		return append(b[:i], append([]byte{c}, b[i:]...)...)
	}
	return append(b[:i], b[i+1:]...)
}

// FuzzCanonicalJSONExclude compares the two implementations on any body
// with any pointers (one a line, the empty and malformed ones included).
func FuzzCanonicalJSONExclude(f *testing.F) {
	f.Add([]byte(`{"b":[1,{"a":2}],"a":1}`), "/a\n/b/0")
	f.Add([]byte(`{"a":[0,1,2,3]}`), "/a/0\n/a/0\n/a/1")
	f.Add([]byte(`{"a/b":{"~":1}}`), "/a~1b/~0")
	f.Add([]byte(`[{"x":1},{"x":2}]`), "/1/x\n/0")
	f.Add([]byte(`{"a":1}`), "\n/a")
	f.Add([]byte(`{"a":[{"t":1,"u":[1,2]},{"t":2}]}`), "/a/*/t\n/a/0/u/*\n/a/1")
	f.Add([]byte(`[[1,2],[3]]`), "/0\n/*/0")
	f.Fuzz(func(t *testing.T, body []byte, pointers string) {
		var ex []string
		if pointers != "" {
			ex = strings.Split(pointers, "\n")
		}
		checkCanonicalJSON(t, body, ex)
	})
}

// FuzzFingerprint compares the two implementations of Fingerprint (and of
// CanonicalBody) on any method, content type, query, header and body.
func FuzzFingerprint(f *testing.F) {
	f.Add("POST", "application/json", "a=1&b=2&a=0", "v", []byte(`{"b":1,"a":2}`))
	f.Add("get", "application/x-www-form-urlencoded; charset=utf-8", "", "", []byte("b=1&a=2&a=1"))
	f.Add("PATCH", "text/plain", "x=%20+y", "a b", []byte("raw"))
	f.Fuzz(func(t *testing.T, method, contentType, query, header string, body []byte) {
		q, _ := url.ParseQuery(query)
		checkFingerprint(t, Request{
			Method: method, Route: "/r/{id}", PathParams: map[string]string{"id": header, header: method},
			Query: q, Header: http.Header{"X-A": {header, query}, http.CanonicalHeaderKey(header): {method}},
			HeaderNames: []string{"x-a", header}, ContentType: contentType, Body: body, Exclude: []string{"/a", "/b/0"},
		})
	})
}

// TestExcludeEveryElement: * steps into every element of an array, and
// only of an array: an object's member named "*" is that member.
func TestExcludeEveryElement(t *testing.T) {
	for _, tc := range []struct {
		body    string
		exclude []string
		want    string
	}{
		{`[{"a":1,"ts":1},{"a":2,"ts":2}]`, []string{"/*/ts"}, `[{"a":1},{"a":2}]`},
		{`{"items":[{"a":1,"ts":1},{"a":2}],"ts":3}`, []string{"/items/*/ts"}, `{"items":[{"a":1},{"a":2}],"ts":3}`},
		{`{"items":[1,2,3]}`, []string{"/items/*"}, `{"items":[]}`},
		{`{"m":[[{"x":1,"y":1}],[{"x":2}]]}`, []string{"/m/*/*/x"}, `{"m":[[{"y":1}],[{}]]}`},
		{`{"*":1,"a":2}`, []string{"/*"}, `{"a":2}`},
		{`{"o":{"a":1}}`, []string{"/o/*"}, `{"o":{"a":1}}`},
		{`{"items":[{"x":1},{"x":2},{"x":3}]}`, []string{"/items/0", "/items/*/x"}, `{"items":[{},{}]}`},
	} {
		got, err := CanonicalJSON([]byte(tc.body), tc.exclude)
		if err != nil || string(got) != tc.want {
			t.Errorf("CanonicalJSON(%s, %v) = %s, %v; want %s", tc.body, tc.exclude, got, err, tc.want)
		}
		checkCanonicalJSON(t, []byte(tc.body), tc.exclude)
	}
}

// TestFormExclusionsCoverBrackets: in a form body, /expand covers expand,
// expand[] and expand[N]; /metadata every metadata[...]; /metadata/trace_id
// metadata[trace_id] alone, as form APIs name nested fields.
func TestFormExclusionsCoverBrackets(t *testing.T) {
	body := "amount=5&expand=a&expand[]=customer&expand[0]=invoice&metadata[k]=v&metadata[trace_id]=t1&metadata[a][b]=c&expanded=x"
	for _, tc := range []struct {
		exclude []string
		want    string
	}{
		{[]string{"/expand"}, "amount=5&expanded=x&metadata%5Ba%5D%5Bb%5D=c&metadata%5Bk%5D=v&metadata%5Btrace_id%5D=t1"},
		{[]string{"/metadata"}, "amount=5&expand=a&expand%5B0%5D=invoice&expand%5B%5D=customer&expanded=x"},
		{[]string{"/metadata/trace_id"}, "amount=5&expand=a&expand%5B0%5D=invoice&expand%5B%5D=customer&expanded=x&metadata%5Ba%5D%5Bb%5D=c&metadata%5Bk%5D=v"},
		{[]string{"/metadata/a"}, "amount=5&expand=a&expand%5B0%5D=invoice&expand%5B%5D=customer&expanded=x&metadata%5Bk%5D=v&metadata%5Btrace_id%5D=t1"},
		{[]string{"/expand/*"}, "amount=5&expand=a&expanded=x&metadata%5Ba%5D%5Bb%5D=c&metadata%5Bk%5D=v&metadata%5Btrace_id%5D=t1"},
	} {
		got, err := CanonicalForm([]byte(body), tc.exclude)
		if err != nil || string(got) != tc.want {
			t.Errorf("CanonicalForm without %v:\n got %s, %v\nwant %s", tc.exclude, got, err, tc.want)
		}
		want, _ := refCanonicalForm([]byte(body), tc.exclude)
		if string(got) != string(want) {
			t.Errorf("CanonicalForm without %v differs from the reference:\n got %s\nwant %s", tc.exclude, got, want)
		}
	}
}

// FuzzCanonicalFormExclude compares the two implementations of a form
// body's exclusions on any body and pointers (one a line).
func FuzzCanonicalFormExclude(f *testing.F) {
	f.Add([]byte("expand[]=a&expand[0]=b&metadata[k][j]=v&x=1"), "/expand\n/metadata/k")
	f.Add([]byte("a]b[c]=1&a[b]]=2&[x]=3&a[=4&a[b]c=5"), "/a\n/a]b/c\n/*")
	f.Fuzz(func(t *testing.T, body []byte, pointers string) {
		var ex []string
		if pointers != "" {
			ex = strings.Split(pointers, "\n")
		}
		got, err := CanonicalForm(body, ex)
		want, wantErr := refCanonicalForm(body, ex)
		sameOutcome(t, "CanonicalForm("+strconv.Quote(string(body))+", "+strings.Join(ex, " ")+")", got, err, want, wantErr)
	})
}
