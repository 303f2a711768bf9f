package idemclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"sync"
)

// Conditional is one call of a conditional write: a request whose
// precondition (If-None-Match: *, If-Match) makes it naturally idempotent,
// so the policy retries it (PUT, DELETE) without a key. Its catch: when the
// first attempt succeeded and its answer was lost, the retry's answer is
// 412 Precondition Failed, the precondition now being false because of
// that very attempt. Conditional keeps what the call sent, so that a 412 on
// a retry can be checked against the resource as it now is (Confirm), as
// the design brief's "natural idempotency, from the client's side" says:
// read it back; equal to what was sent means the first attempt succeeded.
// Generated idempotent clients make one per call of such an operation.
type Conditional struct {
	ctx     context.Context
	tracker *Tracker
	mu      sync.Mutex
	sent    []byte
}

// NewConditional starts a conditional write's call. Use Context for its
// requests and Capture as their request editor.
func NewConditional(ctx context.Context) *Conditional {
	ctx, t := Track(ctx)
	return &Conditional{ctx: ctx, tracker: t}
}

// Context returns the context to send the call's requests with.
func (c *Conditional) Context() context.Context { return c.ctx }

// Capture keeps the request's body, what every attempt sends. Its
// signature is that of oapi-codegen's RequestEditorFn. A body that cannot
// be read twice (no GetBody) is not kept: no retry resends it either.
func (c *Conditional) Capture(_ context.Context, req *http.Request) error {
	if req.Body == nil || req.Body == http.NoBody || req.GetBody == nil {
		return nil
	}
	body, err := req.GetBody()
	if err != nil {
		return fmt.Errorf("idemclient: reading the body of a conditional write: %w", err)
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		return fmt.Errorf("idemclient: reading the body of a conditional write: %w", err)
	}
	c.mu.Lock()
	c.sent = b
	c.mu.Unlock()
	return nil
}

// Sent is the body the call sent; nil before the first attempt, or when it
// could not be kept.
func (c *Conditional) Sent() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent
}

// Confirm decides what a 412 means. It returns true when the call's last
// answer was 412 after more than one attempt (an earlier attempt may have
// been the one that made the precondition false) and the resource, as
// readBack fetches it (its body, with its status, which must be 2xx), is
// what the call sent, as same judges (nil: SameJSON). It returns false,
// with no error, in every other case: the first attempt's 412 (the
// resource was there before this call), a resource that differs, one that
// cannot be read.
func (c *Conditional) Confirm(ctx context.Context, readBack func(context.Context) (status int, body []byte, err error), same func(sent, current []byte) bool) (bool, error) {
	res := c.tracker.Result()
	if res.Status != http.StatusPreconditionFailed || res.Attempts < 2 {
		return false, nil
	}
	sent := c.Sent()
	if sent == nil {
		return false, nil
	}
	status, current, err := readBack(ctx)
	if err != nil {
		return false, fmt.Errorf("idemclient: reading the resource back after a 412: %w", err)
	}
	if status < 200 || status > 299 {
		return false, nil
	}
	if same == nil {
		same = SameJSON
	}
	if !same(sent, current) {
		return false, nil
	}
	c.tracker.mu.Lock()
	c.tracker.res.Confirmed = true
	c.tracker.mu.Unlock()
	return true, nil
}

// Result returns what the call came to so far.
func (c *Conditional) Result() Result { return c.tracker.Result() }

// SameJSON reports whether current, a JSON document read back, holds what
// sent, the JSON document written, says: every member of each object sent
// is in current's object with the same value (current may have more: an
// id, timestamps), arrays element by element and of the same length,
// numbers by their exact decimal value. Documents that do not parse are
// never the same.
func SameJSON(sent, current []byte) bool {
	a, err := decodeJSON(sent)
	if err != nil {
		return false
	}
	b, err := decodeJSON(current)
	if err != nil {
		return false
	}
	return contains(a, b)
}

func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("data after the document")
	}
	return v, nil
}

// contains reports whether b holds a: as SameJSON says.
func contains(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok {
			return false
		}
		for k, av := range a {
			bv, ok := bm[k]
			if !ok || !contains(av, bv) {
				return false
			}
		}
		return true
	case []any:
		bl, ok := b.([]any)
		if !ok || len(bl) != len(a) {
			return false
		}
		for i := range a {
			if !contains(a[i], bl[i]) {
				return false
			}
		}
		return true
	case json.Number:
		bn, ok := b.(json.Number)
		return ok && sameNumber(a, bn)
	default: // string, bool, nil
		return a == b
	}
}

// sameNumber compares two JSON numbers by value: 1, 1.0 and 10e-1 are the
// same.
func sameNumber(a, b json.Number) bool {
	if a == b {
		return true
	}
	ra, ok1 := new(big.Rat).SetString(string(a))
	rb, ok2 := new(big.Rat).SetString(string(b))
	return ok1 && ok2 && ra.Cmp(rb) == 0
}
