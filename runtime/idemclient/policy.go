// Package idemclient calls APIs that speak the Idempotency-Key protocol
// (idemgen services, and any API following the IETF draft or Stripe's
// convention) safely from Go, with nothing but net/http.
//
// The rules it implements:
//
//   - One key per intent, not per attempt: a request is retried with the
//     headers it was first sent with, key included. Mint the key with NewKey
//     when the intent is born, store it with the intent, and send it on every
//     call for that intent.
//   - Retry what cannot have done harm or what the server asked to be
//     retried: connection errors, 409 with Retry-After (the key's first
//     request is still running), 429, and 5xx (except 501).
//   - Never retry an answer: 422 (the key was used for another request),
//     any other 4xx (a 402 declined card is a business outcome), and any
//     response marked Idempotent-Replayed: true, whatever its status (the
//     server stored it; asking again gets the same bytes).
//   - Wait as the server says: Retry-After in seconds or as an HTTP-date, with
//     a little jitter so that clients told the same thing do not come back
//     together; otherwise exponential backoff with jitter.
//   - Stop at the context's deadline: a wait that would end after it is not
//     started, and the last answer is returned instead.
//   - Never retry a request whose body cannot be replayed (no GetBody), and
//     never retry a request without a key whose method is not idempotent
//     (POST, PATCH) unless the server provably never received it or never
//     processed it: no connection was made (the dial refused, or the
//     connection lost before it was ready, in a TLS handshake or a
//     proxy's CONNECT), or HTTP/2 refused the stream (a GOAWAY that
//     excludes it, REFUSED_STREAM). Then any request may be resent.
//   - An answer may be the proof that an earlier attempt did the work: a
//     DELETE answered 404 or 410 after an attempt whose outcome is unknown
//     is Result.Gone, and a conditional write's 412 on a retry, read back
//     and found to hold what was sent, is Result.Confirmed
//     (Conditional.Confirm); Result.Done says the intent is done.
//
// Three ways to use the rules: Transport (an http.RoundTripper, for any
// http.Client), NewDoer (around any Do(*http.Request) client, e.g. the one
// oapi-codegen's clients take), and Policy.CheckRetry, Policy.Backoff and
// Policy.PrepareRetry for github.com/hashicorp/go-retryablehttp. Track (or
// NewCall, which also sets the key) reports how many attempts a call took and
// whether its answer was a replay.
package idemclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// The protocol's header names, as idemtype defines them.
const (
	// DefaultHeader carries the key unless Policy.Header says otherwise.
	DefaultHeader = idemtype.DefaultKeyHeader
	// ReplayedHeader is "true" on a response the server stored earlier and
	// sent again.
	ReplayedHeader = idemtype.ReplayedHeader
)

// Defaults of Policy's fields.
const (
	DefaultMaxAttempts   = 10
	DefaultMinWait       = 100 * time.Millisecond
	DefaultMaxWait       = 5 * time.Second
	DefaultMaxRetryAfter = time.Minute
)

// NewKey returns a fresh key for one intent: a UUIDv7 (RFC 9562), 36
// characters, unique, and ordered by creation time, which keeps the index of
// a key column (yours, or the server's) compact.
func NewKey() string {
	// NewV7 fails only when the system's random source does, which Go's
	// crypto/rand treats as fatal; Must cannot panic in practice.
	return uuid.Must(uuid.NewV7()).String()
}

// Replayed reports whether res is a stored answer sent again
// (Idempotent-Replayed: true).
func Replayed(res *http.Response) bool {
	return res != nil && strings.EqualFold(strings.TrimSpace(res.Header.Get(ReplayedHeader)), "true")
}

// Policy decides which answers are retried and how long to wait. The zero
// value is the default policy.
type Policy struct {
	// Header is the request header that carries the key (default
	// Idempotency-Key). A request with this header set, or with the header
	// of the Call it belongs to, is safe to retry whatever its method.
	Header string
	// MaxAttempts bounds the attempts of one request, the first included
	// (default 10). The context's deadline bounds the total time as well.
	MaxAttempts int
	// MinWait and MaxWait bound the exponential backoff used when the
	// server gives no Retry-After: about MinWait, 2*MinWait, 4*MinWait...,
	// at most MaxWait (defaults 100ms and 5s), each drawn between half and
	// all of that.
	MinWait, MaxWait time.Duration
	// MaxRetryAfter is the longest Retry-After honoured (default 1m): an
	// answer asking for a longer wait is returned, so that the caller can
	// store its key and come back later.
	MaxRetryAfter time.Duration
	// OnAttempt, when set, is called after each attempt, in the caller's
	// goroutine, before any wait (for logs and metrics).
	OnAttempt func(Attempt)
	// Horizon bounds the age of the intents whose requests are sent: the
	// server's retention, how long it keeps a key. A keyed request whose
	// intent began longer ago than Horizon less HorizonMargin is not sent:
	// it fails with an *IntentExpiredError, since the server may have
	// forgotten the key and would execute it again. A Call's WithRetention
	// (which the generated client sets per operation) takes precedence. 0
	// bounds nothing. An intent begins at the time WithIntentStart gives,
	// or that its UUIDv7 key holds, or else at its call's first attempt.
	Horizon time.Duration
	// HorizonMargin is the time kept free before the horizon, for the
	// clocks of client and server to disagree and for a request's time in
	// flight (default a tenth of the horizon, at most an hour).
	HorizonMargin time.Duration
}

// Attempt describes one attempt of a request, for Policy.OnAttempt.
type Attempt struct {
	Request *http.Request // what was sent (nil in CheckRetry after a transport error)
	N       int           // 1 for the first attempt (0 in CheckRetry without Track)
	Status  int           // the answer's status; 0 when Err is set
	Header  http.Header   // the answer's header; nil when Err is set
	Err     error         // the transport error, if any
	// Retry says whether another attempt follows, after Wait.
	Retry bool
	Wait  time.Duration
	// Reason says why the request is retried or why it stops, e.g.
	// "409 in flight, Retry-After 2s" or "422 is an answer".
	Reason string
}

func (p Policy) withDefaults() Policy {
	if p.Header == "" {
		p.Header = DefaultHeader
	}
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.MinWait <= 0 {
		p.MinWait = DefaultMinWait
	}
	if p.MaxWait <= 0 {
		p.MaxWait = DefaultMaxWait
	}
	if p.MaxWait < p.MinWait {
		p.MaxWait = p.MinWait
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = DefaultMaxRetryAfter
	}
	return p
}

// verdict is the policy's decision on one answer.
type verdict struct {
	retry  bool
	wait   time.Duration // before the next attempt: Retry-After or the backoff, with jitter
	hinted bool          // wait came from Retry-After
	reason string
}

// judge decides whether the answer to req (a response or an error) is
// retried. n is the attempt number (1 for the first), 0 when unknown. req may
// be nil when only an error is known (go-retryablehttp's CheckRetry).
func (p Policy) judge(ctx context.Context, req *http.Request, res *http.Response, err error, n int) verdict {
	return p.judgeSent(ctx, req, res, err, n, nil)
}

// judgeSent is judge with what the attempt's trace saw of its connection
// (nil: nothing known), which may prove that the request was never sent.
func (p Policy) judgeSent(ctx context.Context, req *http.Request, res *http.Response, err error, n int, sent *sendTrace) verdict {
	if ctx.Err() != nil {
		return verdict{reason: "context done: " + context.Cause(ctx).Error()}
	}
	v := classify(res, err)
	if !v.retry {
		return v
	}
	if req != nil {
		if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
			return verdict{reason: v.reason + "; not retried: the body cannot be replayed (no GetBody)"}
		}
		if p.key(req) == "" && !idempotentMethod(req.Method) && !neverSent(err, sent) {
			return verdict{reason: fmt.Sprintf("%s; not retried: %s without %s may have taken effect", v.reason, req.Method, p.Header)}
		}
	}
	if n > 0 && n >= p.MaxAttempts {
		return verdict{reason: fmt.Sprintf("%s; not retried: %d attempts made", v.reason, n)}
	}
	if v.hinted && v.wait > p.MaxRetryAfter {
		return verdict{reason: fmt.Sprintf("%s; not retried: longer than MaxRetryAfter %v", v.reason, p.MaxRetryAfter)}
	}
	if !v.hinted {
		v.wait = p.backoff(n)
	}
	v.wait = p.jittered(v)
	if d, ok := ctx.Deadline(); ok && time.Now().Add(v.wait).After(d) {
		return verdict{reason: fmt.Sprintf("%s; not retried: the context's deadline comes first", v.reason)}
	}
	return v
}

// classify applies the protocol's rules to one answer.
func classify(res *http.Response, err error) verdict {
	if err != nil {
		if permanent(err) {
			return verdict{reason: "error: " + err.Error()}
		}
		return verdict{retry: true, reason: "connection error: " + err.Error()}
	}
	code := res.StatusCode
	ra, hinted := retryAfter(res.Header)
	hint := ""
	if hinted {
		hint = ", Retry-After " + ra.String()
	}
	switch {
	case Replayed(res):
		return verdict{reason: fmt.Sprintf("%d replayed: the stored answer", code)}
	case code == http.StatusConflict && hinted:
		return verdict{retry: true, wait: ra, hinted: true, reason: "409 in flight" + hint}
	case code == http.StatusConflict:
		return verdict{reason: "409 without Retry-After is an answer"}
	case code == http.StatusTooManyRequests:
		return verdict{retry: true, wait: ra, hinted: hinted, reason: "429 too many requests" + hint}
	case code == http.StatusNotImplemented:
		return verdict{reason: "501 is an answer"}
	case code >= 500 && code <= 599:
		return verdict{retry: true, wait: ra, hinted: hinted, reason: strconv.Itoa(code) + " server error" + hint}
	}
	return verdict{reason: strconv.Itoa(code) + " is an answer"}
}

// backoff is the wait after attempt n without a Retry-After: MinWait
// doubling up to MaxWait.
func (p Policy) backoff(n int) time.Duration {
	d := p.MinWait
	for i := 1; i < n && d < p.MaxWait; i++ {
		d *= 2
	}
	return min(d, p.MaxWait)
}

// jittered spreads clients that were told the same thing: a backoff is
// drawn between half and all of it; a Retry-After is a minimum, extended by
// up to a tenth of it (at least MinWait).
func (p Policy) jittered(v verdict) time.Duration {
	if v.hinted {
		spread := max(v.wait/10, p.MinWait)
		return v.wait + rand.N(spread)
	}
	half := v.wait / 2
	return half + rand.N(v.wait-half+1)
}

// retryAfter parses Retry-After: delay-seconds or an HTTP-date (RFC 9110).
// A date in the past is a wait of zero.
func retryAfter(h http.Header) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 || s > int64(24*time.Hour/time.Second) {
			return 0, false
		}
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}

// key returns the idempotency key req carries: in the policy's header, in
// the header of the Call whose context req has (an operation may name its
// own key header), or in the body of a NewBodyCall's request; "" when none.
func (p Policy) key(req *http.Request) string {
	if k := strings.TrimSpace(req.Header.Get(p.Header)); k != "" {
		return k
	}
	tr, _ := req.Context().Value(trackerKey{}).(*Tracker)
	switch {
	case tr == nil:
		return ""
	case tr.header != "":
		return strings.TrimSpace(req.Header.Get(tr.header))
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.fromBody {
		return tr.res.Key
	}
	return ""
}

// idempotentMethod reports whether RFC 9110 defines method as idempotent.
func idempotentMethod(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// refused reports whether err happened while connecting, so that nothing of
// the request reached the server.
func refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// neverSent reports whether err proves that the server never received the
// request, or received it and did not process it, so that any request may
// be sent again, whatever its method and with no key:
//
//   - no connection was made: the dial failed (refused), or the attempt
//     asked for a connection and never got one (sent's trace: a TLS
//     handshake or a proxy's CONNECT that failed, a connection reset
//     before the request was written to it);
//   - HTTP/2 said so (RFC 9113, sections 6.8 and 8.7): a GOAWAY whose
//     last stream id excludes the request's, or REFUSED_STREAM.
//     net/http's transport resends such a request by itself when it can
//     (a body with GetBody); what reaches the caller are the cases it
//     gave up on, known only by their text, matched whole (a GOAWAY's
//     debug data, which the server writes, never matches).
//
// Nothing else is a proof: an EOF or a reset after the request was handed
// to the connection may come after the server read it.
func neverSent(err error, sent *sendTrace) bool {
	if err == nil {
		return false
	}
	if refused(err) || sent.noConnection() {
		return true
	}
	// The innermost error, whose text net/http makes from fixed words and
	// the frame's code: a GOAWAY error for a stream the server may have
	// processed carries the server's debug data, which must not pass for
	// these.
	for u := errors.Unwrap(err); u != nil; u = errors.Unwrap(err) {
		err = u
	}
	msg := err.Error()
	return msg == http2GracefulGoAway || http2GoAwayFromServer.MatchString(msg) || http2RefusedStream.MatchString(msg)
}

// The texts of net/http's HTTP/2 errors (h2_bundle.go) that prove a
// request unprocessed: a GOAWAY that excluded its stream (with NO_ERROR,
// or another code), and REFUSED_STREAM from the peer.
var (
	http2GracefulGoAway   = "http2: Transport received Server's graceful shutdown GOAWAY"
	http2GoAwayFromServer = regexp.MustCompile(`^http2: Transport received GOAWAY from server ErrCode:[A-Z_]+$`)
	http2RefusedStream    = regexp.MustCompile(`^stream error: stream ID [0-9]+; REFUSED_STREAM; received from peer$`)
)

// sendTrace is what an attempt's client trace saw of its connection.
type sendTrace struct {
	getConn, gotConn atomic.Bool
}

// wrap returns req with a client trace that fills t in, composed with the
// trace req's context has.
func (t *sendTrace) wrap(req *http.Request) *http.Request {
	ctx := httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GetConn: func(string) { t.getConn.Store(true) },
		GotConn: func(httptrace.GotConnInfo) { t.gotConn.Store(true) },
	})
	return req.WithContext(ctx)
}

// noConnection reports whether the attempt asked for a connection and got
// none: nothing of the request was written. A transport that does not
// report to traces (GetConn never fired) proves nothing.
func (t *sendTrace) noConnection() bool {
	return t != nil && t.getConn.Load() && !t.gotConn.Load()
}

// permanent reports whether a transport error would recur on every retry:
// a bad certificate, a bad URL scheme, a malformed header, a redirect loop.
func permanent(err error) bool {
	var (
		unknown   x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verifyErr *tls.CertificateVerificationError
	)
	if errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &verifyErr) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"unsupported protocol scheme", "invalid header field", "stopped after", "no Host in request URL"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
