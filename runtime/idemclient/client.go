package idemclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Doer sends one HTTP request: *http.Client, and the HttpRequestDoer of
// oapi-codegen's clients, are Doers.
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// NewDoer returns a Doer that sends each attempt with next (an
// *http.Client, whose Timeout then bounds each attempt) and retries as p
// says. The request's context bounds all attempts together.
func NewDoer(next Doer, p Policy) Doer {
	return &doer{next: next, p: p.withDefaults()}
}

type doer struct {
	next Doer
	p    Policy
}

func (d *doer) Do(req *http.Request) (*http.Response, error) { return d.p.send(req, d.next.Do) }

// Transport is an http.RoundTripper that retries as Policy says. Each
// attempt goes through Base (http.DefaultTransport when nil); an
// http.Client's Timeout bounds all attempts together, as does the request's
// context.
type Transport struct {
	Base   http.RoundTripper
	Policy Policy
}

// RoundTrip sends req, retrying as t.Policy says. It does not change req:
// a retry sends a clone, with the body from req.GetBody.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return t.Policy.withDefaults().send(req, base.RoundTrip)
}

// send is the retry loop. p has its defaults.
func (p Policy) send(req *http.Request, attempt func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	ctx := req.Context()
	tr, _ := ctx.Value(trackerKey{}).(*Tracker)
	key := p.key(req)
	var start time.Time
	if key != "" {
		start = intentStart(ctx, tr, key)
	}
	horizon, margin := p.horizon(tr)
	cur := req
	ambiguous := false // an earlier attempt may have taken effect
	for n := 1; ; n++ {
		if n > 1 {
			next, err := rewind(req)
			if err != nil {
				return nil, err
			}
			cur = next
		}
		if key != "" {
			// Every keyed attempt says how old its intent is, and none is
			// sent once the server may have forgotten its key.
			age := time.Since(start)
			if horizon > 0 && age > horizon-margin {
				return nil, &IntentExpiredError{Key: key, Age: age, Horizon: horizon, Margin: margin}
			}
			if n == 1 {
				cur = req.Clone(ctx) // a RoundTripper must not change req
			}
			cur.Header.Set(IntentAgeHeader, strconv.FormatInt(int64(max(age, 0)/time.Second), 10))
		}
		sent := &sendTrace{}
		cur = sent.wrap(cur)
		res, err := attempt(cur)
		v := p.judgeSent(ctx, cur, res, err, n, sent)
		if err != nil && !neverSent(err, sent) || res != nil && res.StatusCode >= 500 && res.StatusCode != http.StatusNotImplemented {
			// This attempt may have taken effect: a later answer may be
			// the effect's (a DELETE's 404).
			ambiguous = true
		}
		tr.record(p.key(cur), res, err, v.retry, v.wait)
		if p.OnAttempt != nil {
			a := Attempt{Request: cur, N: n, Err: err, Retry: v.retry, Reason: v.reason}
			if res != nil {
				a.Status, a.Header = res.StatusCode, res.Header
			}
			if v.retry {
				a.Wait = v.wait
			}
			p.OnAttempt(a)
		}
		if !v.retry {
			if ambiguous && err == nil && !Replayed(res) && req.Method == http.MethodDelete && (res.StatusCode == http.StatusNotFound || res.StatusCode == http.StatusGone) {
				tr.gone()
			}
			return res, err
		}
		if res != nil {
			// Read a little of the body so the connection can be reused.
			io.CopyN(io.Discard, res.Body, 64<<10)
			res.Body.Close()
		}
		timer := time.NewTimer(v.wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("idemclient: %s %s: gave up after %d attempt(s) (last: %s): %w",
				req.Method, req.URL.Redacted(), n, v.reason, context.Cause(ctx))
		case <-timer.C:
		}
	}
}

// rewind returns a copy of req with a fresh body for the next attempt.
func rewind(req *http.Request) (*http.Request, error) {
	next := req.Clone(req.Context())
	if req.Body == nil || req.Body == http.NoBody {
		return next, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("idemclient: rewinding the request body: %w", err)
	}
	next.Body = body
	return next, nil
}

// Result is what one call came to.
type Result struct {
	// Key is the idempotency key every attempt sent ("" when none).
	Key string
	// Attempts counts the requests sent, the first included.
	Attempts int
	// Replayed is true when the answer was a stored one
	// (Idempotent-Replayed: true): an earlier attempt, or an earlier call
	// with the same key, executed the request.
	Replayed bool
	// Waited is the time spent waiting between attempts.
	Waited time.Duration
	// Status is the last answer's status, 0 when the last attempt failed.
	Status int
	// Confirmed is set on a conditional write (Conditional) whose 412 on a
	// retry was checked against the resource read back: it holds what the
	// call sent, so an earlier attempt, whose answer was lost, made it.
	// Treat the write as done.
	Confirmed bool
	// Gone is set on a DELETE answered 404 or 410 (not replayed) after an attempt whose
	// outcome is unknown (a connection lost after the request was sent, a
	// 5xx): that attempt may have deleted the resource, as the intent
	// asked. Treat the delete as done.
	Gone bool
}

// Done reports whether the call's intent is done: a 2xx answer, a
// conditional write Confirmed, or a DELETE whose resource is Gone.
func (r Result) Done() bool {
	return r.Status >= 200 && r.Status <= 299 || r.Confirmed || r.Gone
}

// gone records that the call's DELETE found its resource gone after an
// ambiguous attempt (Result.Gone).
func (t *Tracker) gone() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.res.Gone = true
	t.mu.Unlock()
}

// Tracker collects the Result of the calls made with its context. It is
// safe for concurrent use.
type Tracker struct {
	mu       sync.Mutex
	res      Result
	header   string        // the key's header, when a Call made the tracker
	fromBody bool          // a body-keyed Call read its key from the body into res.Key
	start    time.Time     // when the call's intent began, once its first attempt asked
	horizon  time.Duration // the call's retention (Call.WithRetention)
}

type trackerKey struct{}

// Track returns a context whose requests, sent through Transport, NewDoer
// or a go-retryablehttp client using Policy.CheckRetry, report their
// attempts to the returned Tracker.
func Track(ctx context.Context) (context.Context, *Tracker) {
	t := &Tracker{}
	return context.WithValue(ctx, trackerKey{}, t), t
}

// Result returns what was recorded so far.
func (t *Tracker) Result() Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.res
}

// record notes one attempt; key is the key it sent, "" when unknown.
func (t *Tracker) record(key string, res *http.Response, err error, retry bool, wait time.Duration) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.res.Attempts++
	if key != "" {
		t.res.Key = key
	}
	t.res.Status, t.res.Replayed = 0, false
	if err == nil && res != nil {
		t.res.Status, t.res.Replayed = res.StatusCode, Replayed(res)
	}
	if retry {
		t.res.Waited += wait
	}
}

// Call is one call for one intent: it carries the intent's key and tracks
// the attempts. Generated idempotent clients make one per method call.
type Call struct {
	ctx     context.Context
	tracker *Tracker
	header  string
	key     string
	pointer string // for NewBodyCall: where the key is in the body
}

// NewCall starts a call whose requests carry key in header (DefaultHeader
// when ""); an empty key is replaced by NewKey(). Use Context for the
// requests and SetKey as their request editor.
func NewCall(ctx context.Context, header, key string) *Call {
	if header == "" {
		header = DefaultHeader
	}
	if key == "" {
		key = NewKey()
	}
	ctx, t := Track(ctx)
	t.res.Key, t.header = key, header
	return &Call{ctx: ctx, tracker: t, header: header, key: key}
}

// NewBodyCall starts a call of an operation whose idempotency key is a
// member of the JSON request body, at the JSON Pointer pointer (an
// x-idempotency key.pointer, such as a webhook's event id). Every attempt
// sends the same body, hence the same key, so the call's requests are
// retried whatever their method, as keyed requests are. SetKey sets no
// header: it reads the key from the body, for Result.
func NewBodyCall(ctx context.Context, pointer string) *Call {
	ctx, t := Track(ctx)
	return &Call{ctx: ctx, tracker: t, pointer: pointer}
}

// Context returns the context to send the call's requests with.
func (c *Call) Context() context.Context { return c.ctx }

// Key returns the call's key; for a NewBodyCall, the one SetKey read ("" before).
func (c *Call) Key() string {
	if c.pointer != "" {
		return c.tracker.Result().Key
	}
	return c.key
}

// SetKey sets the call's key on req. Its signature is that of oapi-codegen's
// RequestEditorFn. For a NewBodyCall it reads the key from req's body
// instead; a body without the key, or one that cannot be read twice (no
// GetBody, which a retry needs too), is sent as is, unkeyed.
func (c *Call) SetKey(_ context.Context, req *http.Request) error {
	if c.pointer == "" {
		req.Header.Set(c.header, c.key)
		return nil
	}
	if req.Body == nil || req.Body == http.NoBody || req.GetBody == nil {
		return nil
	}
	body, err := req.GetBody()
	if err != nil {
		return fmt.Errorf("idemclient: reading the key from the body: %w", err)
	}
	defer body.Close()
	if key := bodyKey(body, c.pointer); key != "" {
		c.tracker.mu.Lock()
		c.tracker.res.Key, c.tracker.fromBody = key, true
		c.tracker.mu.Unlock()
	}
	return nil
}

// bodyKey returns the string or number at pointer in the JSON document r,
// or "" when there is none.
func bodyKey(r io.Reader, pointer string) string {
	var v any
	dec := json.NewDecoder(r)
	dec.UseNumber()
	toks, err := idemtype.ParsePointer(pointer)
	if err != nil || dec.Decode(&v) != nil {
		return ""
	}
	for _, tok := range toks {
		obj, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = obj[tok]
	}
	switch t := v.(type) {
	case string:
		return t
	case json.Number:
		return t.String()
	}
	return ""
}

// Result returns what the call came to so far; Key is always set, except
// for a NewBodyCall whose body held no key.
func (c *Call) Result() Result {
	r := c.tracker.Result()
	if c.pointer == "" {
		r.Key = c.key
	}
	return r
}

// PreferWait returns a request editor (the signature of oapi-codegen's
// RequestEditorFn) that sends Prefer: wait=N (RFC 7240), N being d in whole
// seconds, rounded down: the longest the server should hold the request
// while another request with its key executes before answering 409 with
// Retry-After. An idemgen server waits up to the operation's budget (10 s
// unless its spec says otherwise) without it; wait=0 asks for the 409 at
// once, for a caller with work of its own to do meanwhile. The server says
// Preference-Applied: wait=N when the preference shortened its wait.
func PreferWait(d time.Duration) func(context.Context, *http.Request) error {
	value := "wait=" + strconv.FormatInt(int64(max(d, 0)/time.Second), 10)
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set("Prefer", value)
		return nil
	}
}
