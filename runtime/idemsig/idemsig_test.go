package idemsig

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

var (
	signedAt = time.Unix(1767225600, 0)
	body     = []byte(`{"id":"evt_1"}`)
)

// TestSignVector pins the scheme to a value computed outside Go:
// HMAC-SHA256("whsec_test", "1767225600." + body), in lowercase hex.
func TestSignVector(t *testing.T) {
	got := Sign(signedAt, body, []byte("whsec_test"))
	want := "t=1767225600,v1=45b40331de0325606dc5400202ade162460fbe48daf9401adfdcd0d7b4f35470"
	if got != want {
		t.Fatalf("Sign = %s\nwant   %s", got, want)
	}
}

func TestHMACVerify(t *testing.T) {
	v := &HMAC{
		Header:    "Cardnet-Signature",
		Secrets:   []Secret{{Sender: "cardnet", Key: []byte("old")}, {Sender: "cardnet", Key: []byte("new")}, {Sender: "acquirer", Key: []byte("acq")}},
		Tolerance: 5 * time.Minute,
		Now:       func() time.Time { return signedAt.Add(time.Minute) },
	}
	cases := []struct {
		name    string
		headers []string
		body    []byte
		sender  string // "" for a refusal
		reason  string
	}{
		{"signed", []string{Sign(signedAt, body, []byte("new"))}, body, "cardnet", ""},
		{"rotated: either secret", []string{Sign(signedAt, body, []byte("retired"), []byte("old"))}, body, "cardnet", ""},
		{"another sender's secret", []string{Sign(signedAt, body, []byte("acq"))}, body, "acquirer", ""},
		{"unknown items ignored", []string{"v0=abc, " + Sign(signedAt, body, []byte("new")) + ",v2=zz"}, body, "cardnet", ""},
		{"at the tolerance's edge", []string{Sign(signedAt.Add(-4*time.Minute), body, []byte("new"))}, body, "cardnet", ""},
		{"clock ahead, within tolerance", []string{Sign(signedAt.Add(5*time.Minute), body, []byte("new"))}, body, "cardnet", ""},
		{"missing", nil, body, "", "no Cardnet-Signature header"},
		{"twice", []string{Sign(signedAt, body, []byte("new")), Sign(signedAt, body, []byte("new"))}, body, "", "appears 2 times"},
		{"wrong secret", []string{Sign(signedAt, body, []byte("guess"))}, body, "", "no v1 signature matches"},
		{"body changed", []string{Sign(signedAt, body, []byte("new"))}, []byte(`{"id":"evt_2"}`), "", "no v1 signature matches"},
		{"timestamp changed", []string{strings.Replace(Sign(signedAt, body, []byte("new")), "t=1767225600", "t=1767225601", 1)}, body, "", "no v1 signature matches"},
		{"too old", []string{Sign(signedAt.Add(-5*time.Minute), body, []byte("new"))}, body, "", "6m0s away"},
		{"too far ahead", []string{Sign(signedAt.Add(7*time.Minute), body, []byte("new"))}, body, "", "6m0s away"},
		{"no timestamp", []string{"v1=" + strings.Repeat("ab", 32)}, body, "", "no timestamp"},
		{"no signature", []string{"t=1767225600"}, body, "", "no v1 signature;"},
		{"short signature", []string{"t=1767225600,v1=abcd"}, body, "", "not 64 hex digits"},
		{"bad timestamp", []string{"t=-5,v1=" + strings.Repeat("ab", 32)}, body, "", "not Unix seconds"},
		{"two timestamps", []string{"t=1,t=2,v1=" + strings.Repeat("ab", 32)}, body, "", "two timestamps"},
		{"garbage", []string{"sha256=deadbeef"}, body, "", "no timestamp"},
		{"no equals sign", []string{"t1767225600"}, body, "", "malformed item"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := http.NewRequest("POST", "http://example.test/webhooks", nil)
			for _, h := range tc.headers {
				r.Header.Add("Cardnet-Signature", h)
			}
			sender, err := v.Verify(r, tc.body)
			if tc.sender != "" {
				if err != nil || sender != tc.sender {
					t.Fatalf("Verify = %q, %v; want %q", sender, err, tc.sender)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || sender != "" || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("Verify = %q, %v; want ErrInvalid saying %q", sender, err, tc.reason)
			}
			if strings.Contains(err.Error(), "new") || strings.Contains(err.Error(), "old") {
				t.Fatalf("the refusal %q shows a secret", err)
			}
		})
	}
}

// TestHMACMisconfigured: a verifier without secrets fails as a server
// error, not as the sender's fault.
func TestHMACMisconfigured(t *testing.T) {
	r, _ := http.NewRequest("POST", "http://example.test/webhooks", nil)
	r.Header.Set(DefaultHeader, Sign(time.Now(), body, []byte("k")))
	for _, v := range []*HMAC{{}, {Secrets: []Secret{{Sender: "s"}}}, {Secrets: []Secret{{Key: []byte("k")}}}} {
		if _, err := v.Verify(r, body); err == nil || errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v; want a configuration error", v, err)
		}
	}
	if s, err := (&HMAC{Secrets: []Secret{{Sender: "s", Key: []byte("k")}}}).Verify(r, body); err != nil || s != "s" {
		t.Fatalf("defaults (header %s, now): %q, %v", DefaultHeader, s, err)
	}
}
