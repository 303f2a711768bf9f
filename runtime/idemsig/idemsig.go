// Package idemsig authenticates signed requests, such as webhook
// deliveries, before anything is claimed. A Verifier checks a signature
// over the raw request body and returns the sender; an operation whose
// x-idempotency scope is sender:<name> runs the runtime's verifier of that
// name and scopes its keys to the sender it returns. HMAC verifies the
// common shared-secret scheme (Stripe's): a timestamp and an HMAC-SHA256 of
// "<timestamp>.<body>" in one header.
//
// The package depends on nothing but the standard library: senders sign
// with Sign, receivers verify with HMAC, whatever their web framework.
package idemsig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid is wrapped by every refusal of a signature: missing,
// malformed, outside the time tolerance, or not matching. The runtime
// answers it with 401 invalid-signature and claims nothing; the error's
// text is the problem's detail, so it never contains secret material.
var ErrInvalid = errors.New("invalid signature")

// Verifier authenticates one request.
type Verifier interface {
	// Verify returns the sender of r, whose raw body is body (r.Body must
	// not be read). An error wrapping ErrInvalid, or an empty sender, is a
	// refusal (401); any other error is a failure of the verifier itself
	// (a secret store that cannot be reached) and is answered 500.
	Verify(r *http.Request, body []byte) (sender string, err error)
}

// VerifierFunc adapts a function to Verifier.
type VerifierFunc func(r *http.Request, body []byte) (string, error)

// Verify calls f(r, body).
func (f VerifierFunc) Verify(r *http.Request, body []byte) (string, error) { return f(r, body) }

// Defaults of HMAC's fields.
const (
	DefaultHeader    = "Webhook-Signature"
	DefaultTolerance = 5 * time.Minute
)

// Secret is one sender's signing secret. A sender may have several while
// its secret is rotated.
type Secret struct {
	Sender string // returned by Verify when this secret's signature matches
	Key    []byte
}

// HMAC verifies the timestamped HMAC-SHA256 scheme Stripe uses for its
// webhooks. The sender puts one header on each delivery:
//
//	Webhook-Signature: t=1767225600,v1=5f1c…(64 hex digits)
//
// t is the time of signing in Unix seconds; each v1 is the lowercase hex
// HMAC-SHA256, under one of the sender's secrets, of the bytes of t as
// written, a full stop, and the raw body: HMAC(key, "1767225600." + body).
// Items are separated by commas; unknown items (v0, a future v2) are
// ignored; a sender rotating its secret sends one v1 per secret. The
// request is accepted when t is within Tolerance of the receiver's clock
// (either way) and some v1 equals the HMAC under some secret (compared in
// constant time); Verify then returns that secret's Sender. A delivery
// retried later is signed again with a new t; its body is the same.
type HMAC struct {
	// Header names the signature header (default Webhook-Signature).
	Header string
	// Secrets are the secrets of every sender this verifier accepts.
	Secrets []Secret
	// Tolerance bounds the difference between t and the receiver's clock
	// (default 5 minutes). A captured delivery sent again after it is
	// refused; within it, the idempotency key makes it a replay, provided
	// the operation's retention is longer.
	Tolerance time.Duration
	// Now is the clock (default time.Now), for tests.
	Now func() time.Time
}

var _ Verifier = (*HMAC)(nil)

// Verify checks r's signature header against body and returns the sender
// whose secret signed it.
func (v *HMAC) Verify(r *http.Request, body []byte) (string, error) {
	if len(v.Secrets) == 0 {
		return "", errors.New("idemsig: HMAC has no secrets")
	}
	for _, s := range v.Secrets {
		if len(s.Key) == 0 || s.Sender == "" {
			return "", errors.New("idemsig: every HMAC secret needs a sender and a non-empty key")
		}
	}
	name := v.Header
	if name == "" {
		name = DefaultHeader
	}
	values := r.Header.Values(name)
	switch len(values) {
	case 0:
		return "", fmt.Errorf("%w: no %s header; send t=(Unix seconds),v1=(hex HMAC-SHA256 of the seconds, a full stop and the body)", ErrInvalid, name)
	case 1:
	default:
		return "", fmt.Errorf("%w: the %s header appears %d times; send it once", ErrInvalid, name, len(values))
	}
	ts, sigs, err := parseHeader(values[0])
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	tolerance := v.Tolerance
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	sec, _ := strconv.ParseInt(ts, 10, 64)
	if d := now().Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return "", fmt.Errorf("%w: %s: the timestamp %s is %v away from this server's clock; at most %v is allowed",
			ErrInvalid, name, ts, d.Abs().Round(time.Second), tolerance)
	}
	for _, s := range v.Secrets {
		want := mac(s.Key, ts, body)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				return s.Sender, nil
			}
		}
	}
	return "", fmt.Errorf("%w: %s: no v1 signature matches the body", ErrInvalid, name)
}

// parseHeader returns the timestamp as written and the v1 signatures.
func parseHeader(value string) (ts string, sigs [][]byte, err error) {
	const want = "want t=(Unix seconds),v1=(64 hex digits)"
	for _, item := range strings.Split(value, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return "", nil, fmt.Errorf("malformed item %q; %s", item, want)
		}
		switch k {
		case "t":
			if ts != "" {
				return "", nil, fmt.Errorf("two timestamps; %s", want)
			}
			if _, err := strconv.ParseUint(val, 10, 63); err != nil || len(val) > 12 {
				return "", nil, fmt.Errorf("the timestamp %q is not Unix seconds; %s", val, want)
			}
			ts = val
		case "v1":
			sig, err := hex.DecodeString(val)
			if err != nil || len(sig) != sha256.Size {
				return "", nil, fmt.Errorf("a v1 signature is not 64 hex digits; %s", want)
			}
			sigs = append(sigs, sig)
		}
	}
	switch {
	case ts == "":
		return "", nil, fmt.Errorf("no timestamp; %s", want)
	case len(sigs) == 0:
		return "", nil, fmt.Errorf("no v1 signature; %s", want)
	}
	return ts, sigs, nil
}

func mac(key []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Sign returns the signature header value for body signed at t with each
// of keys (one v1 per key, for a secret being rotated), as HMAC verifies
// it: "t=<unix seconds>,v1=<hex>[,v1=<hex>…]". Sign again for every
// delivery attempt, so that the timestamp is fresh.
func Sign(t time.Time, body []byte, keys ...[]byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=" + ts)
	for _, k := range keys {
		b.WriteString(",v1=" + hex.EncodeToString(mac(k, ts, body)))
	}
	return b.String()
}
