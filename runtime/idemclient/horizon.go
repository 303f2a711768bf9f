package idemclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// IntentAgeHeader is the header every keyed attempt carries: how old its
// intent is, in whole seconds (idemtype.IntentAgeHeader). The server
// exports it as a signal of retries arriving near or past its retention.
const IntentAgeHeader = idemtype.IntentAgeHeader

// ErrIntentExpired is what a request whose intent has outlived the server's
// memory of its key fails with (see IntentExpiredError).
var ErrIntentExpired = errors.New("idemclient: the intent is older than the server keeps its key")

// IntentExpiredError is returned, instead of sending, for a request whose
// intent began longer ago than the server keeps its key (the retention),
// less a margin: the server may have forgotten the key, and would then
// execute the request a second time. The intent must be evaluated again:
// find out whether it took effect (read the resource it made), and send it
// under a new key only if it did not. errors.Is(err, ErrIntentExpired)
// holds.
type IntentExpiredError struct {
	Key     string        // the intent's key
	Age     time.Duration // how long ago the intent began
	Horizon time.Duration // the server's retention the request was held to
	Margin  time.Duration // kept free before Horizon
}

func (e *IntentExpiredError) Error() string {
	return fmt.Sprintf("idemclient: the intent of key %q began %s ago, within %s of the %s the server keeps a key: "+
		"sent now it could execute a second time; find out whether it took effect before sending it again under a new key",
		e.Key, e.Age.Round(time.Second), e.Margin, e.Horizon)
}

func (e *IntentExpiredError) Unwrap() error { return ErrIntentExpired }

type intentStartKey struct{}

// WithIntentStart returns a context whose requests take their intent to
// have begun at start: the time stored with the intent's key when it was
// made, for retrying an intent after a crash or an outage. A key that is a
// UUIDv7 (NewKey mints them) carries that time itself and needs none;
// without either, an intent begins with its call's first attempt.
func WithIntentStart(ctx context.Context, start time.Time) context.Context {
	return context.WithValue(ctx, intentStartKey{}, start)
}

// intentStart returns when the intent of a request with key began: the
// context's WithIntentStart, the time of a UUIDv7 key, the time the call
// first asked, or else now.
func intentStart(ctx context.Context, tr *Tracker, key string) time.Time {
	if t, ok := ctx.Value(intentStartKey{}).(time.Time); ok {
		return t
	}
	if u, err := uuid.Parse(key); err == nil && u.Version() == 7 {
		sec, nsec := u.Time().UnixTime()
		return time.Unix(sec, nsec)
	}
	if tr == nil {
		return time.Now()
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.start.IsZero() {
		tr.start = time.Now()
	}
	return tr.start
}

// horizon returns the retention a request is held to, and the margin kept
// before it: the call's (WithRetention), else the policy's.
func (p Policy) horizon(tr *Tracker) (time.Duration, time.Duration) {
	h := p.Horizon
	if tr != nil && tr.horizon > 0 {
		h = tr.horizon
	}
	m := p.HorizonMargin
	if m <= 0 {
		m = min(h/10, time.Hour)
	}
	return h, m
}

// WithRetention holds the call's requests to the server's retention for
// the operation: a request whose intent is older than d, less the policy's
// HorizonMargin, is not sent and fails with an *IntentExpiredError. The
// generated client sets each operation's retention, as its x-idempotency
// declares it.
func (c *Call) WithRetention(d time.Duration) *Call {
	c.tracker.mu.Lock()
	c.tracker.horizon = d
	c.tracker.mu.Unlock()
	return c
}
