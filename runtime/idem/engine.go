// Package idem is the idempotency engine that generated handlers call: it
// claims keys in PostgreSQL, runs an operation's phases under a fenced lease,
// records recovery points, stores responses and replays them.
//
// The guarantee, per (namespace, scope, key) within the retention window: at
// most one execution commits each local phase, every execution that reaches
// the end stores the same response that all later requests replay, and an
// execution whose owner lost its lease commits nothing more. See
// docs/runtime.md for the argument and the non-guarantees.
package idem

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options configure an Engine.
type Options struct {
	// Schema holds the engine's tables (see Migrate). Default "idemgen".
	Schema string
	// Observer receives events for metrics. Default: none.
	Observer Observer
	// Logger receives warnings (refresh failures, refused releases).
	// Default: slog.Default().
	Logger *slog.Logger
	// AsyncClaimCommit commits the claim insert with synchronous_commit=off.
	// A claim lost in a crash had no effects, and the first phase's durable
	// commit flushes the WAL that holds it; see docs/runtime.md.
	AsyncClaimCommit bool
	// DerivedKeyLength is the length of derived keys for foreign phases,
	// 20 to 64 (default 64), for foreign systems with smaller limits.
	DerivedKeyLength int
	// PolicyURL, when set, is linked from every problem response
	// (Link: <PolicyURL>; rel="describedby").
	PolicyURL string
}

// Engine runs idempotent executions. It is safe for concurrent use.
type Engine struct {
	pool   *pgxpool.Pool
	opts   Options
	obs    Observer
	log    *slog.Logger
	q      queries
	resume map[string]resumer // by operation ID, for the background completer
	ops    []*Operation       // operations with a completer, in registration order
}

// New returns an engine on pool. The schema must have been migrated (see
// Migrate); New does not touch the database.
func New(pool *pgxpool.Pool, opts Options) (*Engine, error) {
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	if err := checkSchema(opts.Schema); err != nil {
		return nil, err
	}
	e := &Engine{pool: pool, opts: opts, obs: opts.Observer, log: opts.Logger,
		q: newQueries(opts.Schema), resume: map[string]resumer{}}
	if e.obs == nil {
		e.obs = nopObserver{}
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	return e, nil
}

// Pool returns the engine's pool.
func (e *Engine) Pool() *pgxpool.Pool { return e.pool }

// PolicyURL returns the configured policy link, if any.
func (e *Engine) PolicyURL() string { return e.opts.PolicyURL }

// Observe reports an event to the engine's observer. Adapters use it for the
// errors they detect before reaching the engine (missing or bad keys).
func (e *Engine) Observe(ev Event) { e.obs.Observe(ev) }

// Request is what identifies one idempotent request.
type Request struct {
	Scope       string // resolved scope value ("" for global scope)
	Key         string // the parsed Idempotency-Key
	Fingerprint []byte // SHA-256 of the canonical request
	// Payload is the request as the operation's completer decodes it; stored
	// only for operations completed in the background.
	Payload []byte
}

// Response is an HTTP response as stored and replayed.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// BodyOmitted is set on a replay whose original body exceeded the
	// policy's MaxReplayBody and was not stored.
	BodyOmitted bool
}

// Outcome is the result of Run.
type Outcome struct {
	Response *Response
	Replayed bool // the response is a stored one, from an earlier execution
	Resumed  bool // this execution continued from an earlier one's recovery point
}

// Phase is one step of an operation. Exactly one of Local, Foreign and Final
// is set; Final only on the last phase.
type Phase[S any] struct {
	Name string
	// Local runs inside a transaction that also advances the recovery point
	// and saves state; both commit or neither does.
	Local func(ctx context.Context, tx pgx.Tx, state *S) error
	// Foreign runs outside any transaction with a key derived from the
	// request's key and the phase. What it writes into state is saved by the
	// next local phase's commit; until then a resumption calls it again,
	// with the same key.
	Foreign func(ctx context.Context, key string, state *S) error
	// Final is the last phase: a local phase whose transaction also stores
	// the response and marks the record completed.
	Final func(ctx context.Context, tx pgx.Tx, state *S) (*Response, error)
}

func (p Phase[S]) foreign() bool { return p.Foreign != nil }

func checkPhases[S any](phases []Phase[S]) error {
	if len(phases) == 0 {
		return errors.New("idem: an operation needs at least one phase")
	}
	seen := map[string]bool{}
	for i, p := range phases {
		n := 0
		for _, set := range []bool{p.Local != nil, p.Foreign != nil, p.Final != nil} {
			if set {
				n++
			}
		}
		switch {
		case p.Name == "" || seen[p.Name]:
			return fmt.Errorf("idem: phase %d: name %q is empty or repeated", i, p.Name)
		case n != 1:
			return fmt.Errorf("idem: phase %q: set exactly one of Local, Foreign, Final", p.Name)
		case (p.Final != nil) != (i == len(phases)-1):
			return fmt.Errorf("idem: phase %q: Final must be set on the last phase and only there", p.Name)
		}
		seen[p.Name] = true
	}
	return nil
}

// Run executes op for req: it claims the key, or replays the stored response,
// or resumes an abandoned execution from its recovery point, and runs the
// phases that remain. Protocol refusals are returned as *Error (409, 422,
// ...); a ReleaseError from a phase is returned as is after the claim was
// deleted.
//
// The phases run detached from ctx's cancellation: a client that goes away
// does not interrupt an execution midway; its retry finds the stored response.
func Run[S any](ctx context.Context, e *Engine, op *Operation, req Request, phases []Phase[S]) (*Outcome, error) {
	if err := checkPhases(phases); err != nil {
		return nil, err
	}
	c, out, err := e.claim(ctx, op, req)
	if err != nil || out != nil {
		return out, err
	}
	return execute(context.WithoutCancel(ctx), e, c, phases)
}

// claim is an execution's hold on a record.
type claim struct {
	op       *Operation
	policy   Policy
	ns       string
	scope    string
	key      string
	token    [16]byte
	recovery string          // last committed phase, "" for none
	state    json.RawMessage // state saved with the recovery point
	resumed  bool
}

func newToken() [16]byte {
	var t [16]byte
	rand.Read(t[:])
	t[6] = (t[6] & 0x0f) | 0x40 // a version 4 UUID, for readable logs
	t[8] = (t[8] & 0x3f) | 0x80
	return t
}

// claim inserts the record, or decides what an existing one means. It
// returns a claim to execute, or an outcome (a replay), or an error.
func (e *Engine) claim(ctx context.Context, op *Operation, req Request) (*claim, *Outcome, error) {
	p := op.Policy.withDefaults()
	c := &claim{op: op, policy: p, ns: op.namespace(), scope: req.Scope, key: req.Key, token: newToken()}
	var payload []byte
	if p.Complete == CompleteBackground {
		payload = req.Payload
	}
	for attempt := 0; attempt < 5; attempt++ {
		inserted, err := e.q.insert(ctx, e.pool, e.opts.AsyncClaimCommit, c, op.ID, req.Fingerprint, payload)
		if err != nil {
			return nil, nil, unavailable("claim", err)
		}
		if inserted {
			e.obs.Observe(Event{Kind: EventClaim, Operation: op.ID})
			return c, nil, nil
		}
		rec, err := e.q.read(ctx, e.pool, c.ns, c.scope, c.key)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // released or pruned since the insert: try again
		}
		if err != nil {
			return nil, nil, unavailable("reading the existing record", err)
		}
		switch {
		case rec.expired:
			// Past retention and not live: the key is free again.
			if err := e.q.deleteExpired(ctx, e.pool, c.ns, c.scope, c.key); err != nil {
				return nil, nil, unavailable("freeing an expired record", err)
			}
			continue
		case string(rec.fingerprint) != string(req.Fingerprint) || rec.operation != op.ID:
			e.obs.Observe(Event{Kind: EventMismatch, Operation: op.ID})
			detail := "this key was first used with a different request"
			if rec.operation != op.ID {
				detail = fmt.Sprintf("this key was first used for operation %s", rec.operation)
			}
			return nil, nil, &Error{Kind: KindMismatch, Detail: detail}
		case rec.state == stateCompleted:
			e.obs.Observe(Event{Kind: EventReplay, Operation: op.ID})
			return nil, &Outcome{Response: rec.response(), Replayed: true}, nil
		case rec.live:
			e.obs.Observe(Event{Kind: EventInFlight, Operation: op.ID})
			return nil, nil, &Error{Kind: KindInFlight, RetryAfter: rec.retryAfter,
				Detail: "another request with this key is being processed; retry later"}
		}
		ok, err := e.q.takeover(ctx, e.pool, c, rec.owner)
		if err != nil {
			return nil, nil, unavailable("takeover", err)
		}
		if ok {
			e.obs.Observe(Event{Kind: EventTakeover, Operation: op.ID})
			return c, nil, nil
		}
		// Someone else took it over or finished it first: look again.
	}
	e.obs.Observe(Event{Kind: EventInFlight, Operation: op.ID})
	return nil, nil, &Error{Kind: KindInFlight, RetryAfter: time.Second, Detail: "the key is contended; retry later"}
}

// unavailable reports a store failure before anything was claimed: the
// client may retry at once.
func unavailable(step string, err error) *Error {
	return &Error{Kind: KindUnavailable, RetryAfter: time.Second, Detail: "the idempotency store did not answer (" + step + ")", Err: err}
}

// execute runs the phases after c's recovery point.
func execute[S any](ctx context.Context, e *Engine, c *claim, phases []Phase[S]) (*Outcome, error) {
	var state S
	start := 0
	if c.recovery != "" {
		i := phaseIndex(phases, c.recovery)
		if i < 0 {
			// The operation's phases changed under a live record: keep it for
			// an operator rather than guess.
			e.yield(c)
			return nil, &Error{Kind: KindFailed, Err: fmt.Errorf("recovery point %q is not a phase of %s", c.recovery, c.op.ID)}
		}
		start = i + 1
	}
	if len(c.state) > 0 {
		if err := json.Unmarshal(c.state, &state); err != nil {
			e.yield(c)
			return nil, &Error{Kind: KindFailed, Err: fmt.Errorf("decoding stored phase state: %w", err)}
		}
	}
	if c.resumed {
		e.obs.Observe(Event{Kind: EventResume, Operation: c.op.ID})
	}

	ctx, stop := e.keepLease(ctx, c)
	defer stop()

	committed := c.recovery != "" // a local phase of this record has committed
	foreignTried := false         // a foreign call may have had an effect
	for i := start; i < len(phases); i++ {
		p := phases[i]
		began := time.Now()
		var resp *Response
		var err error
		switch {
		case p.foreign():
			foreignTried = true
			key := DeriveKey(c.ns, c.scope, c.key, p.Name, e.opts.DerivedKeyLength)
			err = p.Foreign(ctx, key, &state)
		default:
			resp, err = e.commitPhase(ctx, c, p.Name, &state, func(tx pgx.Tx) (*Response, error) {
				if p.Final != nil {
					return p.Final(ctx, tx, &state)
				}
				return nil, p.Local(ctx, tx, &state)
			})
		}
		if err != nil && errors.Is(context.Cause(ctx), ErrFenced) {
			err = ErrFenced // whatever the phase saw, the cause is the lost lease
		}
		e.obs.Observe(Event{Kind: EventPhase, Operation: c.op.ID, Phase: p.Name, Duration: time.Since(began), Err: err})
		if err != nil {
			return e.fail(c, committed, foreignTried, err)
		}
		if resp != nil {
			e.obs.Observe(Event{Kind: EventComplete, Operation: c.op.ID})
			return &Outcome{Response: resp, Resumed: c.resumed}, nil
		}
		if !p.foreign() {
			committed = true
			c.recovery = p.Name
		}
	}
	return nil, errors.New("idem: the last phase returned no response")
}

func phaseIndex[S any](phases []Phase[S], name string) int {
	for i, p := range phases {
		if p.Name == name {
			return i
		}
	}
	return -1
}

// commitPhase runs one local phase in a transaction that also advances the
// recovery point (and, for the final phase, stores the response), fenced by
// the owner token.
func (e *Engine) commitPhase(ctx context.Context, c *claim, name string, state any, run func(pgx.Tx) (*Response, error)) (*Response, error) {
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	resp, err := run(tx)
	if err != nil {
		return nil, err
	}
	st, err := json.Marshal(state)
	if err != nil {
		return nil, fmt.Errorf("idem: encoding phase state after %s: %w", name, err)
	}
	var ok bool
	if resp != nil {
		stored := &Response{Status: resp.Status, Header: c.policy.storedHeaders(resp.Header), Body: resp.Body}
		if len(stored.Body) > c.policy.MaxReplayBody {
			stored.Body, stored.BodyOmitted = nil, true
		}
		ok, err = e.q.complete(ctx, tx, c, name, st, stored)
	} else {
		ok, err = e.q.advance(ctx, tx, c, name, st)
	}
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrFenced
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return resp, nil
}

// fail applies the outcome rules to a failed phase.
func (e *Engine) fail(c *claim, committed, foreignTried bool, err error) (*Outcome, error) {
	ctx := context.Background()
	var rel *ReleaseError
	var protoErr *Error
	// The phase declared the failure effect-free: a release, or a protocol
	// error such as the not-implemented stub.
	declared := errors.As(err, &rel) || errors.As(err, &protoErr)
	switch {
	case errors.Is(err, ErrFenced):
		e.obs.Observe(Event{Kind: EventFenced, Operation: c.op.ID})
		return nil, &Error{Kind: KindInFlight, RetryAfter: time.Second, Err: err,
			Detail: "another execution took this key over; retry to get its result"}
	case !committed && (declared || !foreignTried):
		// Nothing of this execution was committed and, unless the phase said
		// so, no foreign call was attempted: no effect exists. The release
		// is conditional on the recovery point: a commit that failed only in
		// its acknowledgement leaves the record in place, as ambiguous.
		released, derr := e.q.release(ctx, e.pool, c)
		if derr != nil {
			e.log.Warn("idem: release failed; the claim expires with its lease", "operation", c.op.ID, "err", derr)
		}
		if released || derr != nil {
			e.obs.Observe(Event{Kind: EventRelease, Operation: c.op.ID})
			return nil, err
		}
	case declared:
		e.log.Warn("idem: release refused: a phase had committed; treating the failure as ambiguous",
			"operation", c.op.ID, "recovery_point", c.recovery, "err", err)
	}
	e.obs.Observe(Event{Kind: EventAmbiguous, Operation: c.op.ID})
	failure := &Error{Kind: KindFailed, Err: err}
	if c.policy.Ambiguous == AmbiguousStore {
		resp := ProblemResponse(failure, e.opts.PolicyURL)
		ok, serr := e.storeFailure(ctx, c, resp)
		if serr == nil && ok {
			e.obs.Observe(Event{Kind: EventComplete, Operation: c.op.ID})
			return &Outcome{Response: resp}, nil
		}
		if serr == nil && !ok {
			e.obs.Observe(Event{Kind: EventFenced, Operation: c.op.ID})
		}
	}
	e.yield(c)
	return nil, failure
}

func (e *Engine) storeFailure(ctx context.Context, c *claim, resp *Response) (bool, error) {
	var ok bool
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		ok, err = e.q.complete(ctx, tx, c, c.recovery, json.RawMessage(c.state), &Response{
			Status: resp.Status, Header: c.policy.storedHeaders(resp.Header), Body: resp.Body})
		return err
	})
	return ok, err
}

// yield gives up c's lease at once, so a retry can resume without waiting
// for it to expire.
func (e *Engine) yield(c *claim) {
	if err := e.q.yield(context.Background(), e.pool, c); err != nil {
		e.log.Warn("idem: giving up the lease failed; it expires by itself", "operation", c.op.ID, "err", err)
	}
}

// keepLease refreshes c's lease every third of its length until stop is
// called. If a refresh finds the lease taken over, the returned context is
// cancelled with cause ErrFenced.
func (e *Engine) keepLease(parent context.Context, c *claim) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	done := make(chan struct{})
	var exited = make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(c.policy.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			// A renewal that takes longer than its interval is useless: give
			// up on it rather than hold up the execution's end.
			rctx, cancelRefresh := context.WithTimeout(context.Background(), c.policy.Lease/3)
			ok, err := e.q.refresh(rctx, e.pool, c)
			cancelRefresh()
			switch {
			case err != nil:
				e.log.Warn("idem: lease refresh failed", "operation", c.op.ID, "err", err)
			case !ok:
				e.obs.Observe(Event{Kind: EventFenced, Operation: c.op.ID})
				cancel(ErrFenced)
				return
			}
		}
	}()
	return ctx, func() {
		close(done)
		<-exited
		cancel(nil)
	}
}

// RunWithoutKey runs the phases once, unprotected, for a request that sent
// no key to an operation whose key is optional: local phases still commit
// atomically one by one, foreign phases get a fresh random key, and nothing
// is recorded or replayed.
func RunWithoutKey[S any](ctx context.Context, e *Engine, op *Operation, phases []Phase[S]) (*Response, error) {
	if err := checkPhases(phases); err != nil {
		return nil, err
	}
	var state S
	nonce := newToken()
	for _, p := range phases {
		if p.foreign() {
			if err := p.Foreign(ctx, DeriveKey(op.namespace(), "", string(nonce[:]), p.Name, e.opts.DerivedKeyLength), &state); err != nil {
				return nil, err
			}
			continue
		}
		var resp *Response
		err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			var err error
			if p.Final != nil {
				resp, err = p.Final(ctx, tx, &state)
				return err
			}
			return p.Local(ctx, tx, &state)
		})
		if err != nil {
			return nil, err
		}
		if resp != nil {
			return resp, nil
		}
	}
	return nil, errors.New("idem: the last phase returned no response")
}
