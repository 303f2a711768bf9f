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
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Options configure an Engine.
type Options struct {
	// Schema holds the engine's tables (see Migrate). Default "idemgen".
	Schema string
	// Observer receives events for metrics. Default: none. A
	// ContextObserver also gets each event's context.
	Observer Observer
	// Tracer is told when each request, its claim and its phases begin and
	// end (runtime/idemotel makes spans of them). Default: none.
	Tracer Tracer
	// Logger receives warnings (refresh failures, refused releases).
	// Default: slog.Default().
	Logger *slog.Logger
	// AsyncClaimCommit commits with synchronous_commit=off the claims that
	// commit on their own: every claim in ClaimSeparate, and a ClaimFirst
	// claim whose first phase is foreign. A claim lost in a crash had no
	// effects, and the first local phase's durable commit flushes the WAL
	// that holds it; see docs/runtime.md. A claim that commits with local
	// phases (ClaimFirst before a local phase, ClaimLast) is not affected.
	AsyncClaimCommit bool
	// ReplayCacheBytes bounds the in-process cache of completed responses,
	// which answers replays without a round trip to the store (default
	// DefaultReplayCacheBytes; negative disables it).
	ReplayCacheBytes int64
	// ReplayCacheTTL is how long the cache answers a key's replays before
	// it reads the record again (default DefaultReplayCacheTTL). A
	// completed record never changes, but an operator may delete it
	// (docs/operations.md): a process that cached it may replay it for up
	// to this long after.
	ReplayCacheTTL time.Duration
	// ClaimWait bounds how long a claim waits for a concurrent request's
	// uncommitted claim of the same key (default 2s, rounded up to a whole
	// millisecond): when the other commits in time, this one replays its
	// answer; otherwise it answers 409.
	ClaimWait time.Duration
	// DerivedKeyLength is the length of derived keys for foreign phases,
	// 20 to 64 (default 64), for foreign systems with smaller limits.
	DerivedKeyLength int
	// PolicyURL, when set, is linked from every problem response
	// (Link: <PolicyURL>; rel="describedby").
	PolicyURL string
	// Claim is the claim mode of operations whose policy leaves it to
	// ClaimAuto (default: ClaimAuto itself, see ClaimMode). ClaimLast here
	// applies to operations whose phases are all local; the others claim
	// first.
	Claim ClaimMode
	// CompleterAttempts bounds a record's attempts (its claim and every
	// takeover, by retries and the background completer together): the
	// completer takes over only a record with fewer, and leaves the rest to
	// an operator (see Abandoned). Default 5.
	CompleterAttempts int
}

// DefaultCompleterAttempts is Options.CompleterAttempts' default.
const DefaultCompleterAttempts = 5

// DefaultReplayCacheTTL is Options.ReplayCacheTTL's default.
const DefaultReplayCacheTTL = time.Minute

// DefaultClaimWait is Options.ClaimWait's default.
const DefaultClaimWait = 2 * time.Second

// rollbackTimeout bounds the ROLLBACK that ends an abandoned transaction.
const rollbackTimeout = 5 * time.Second

// Engine runs idempotent executions. It is safe for concurrent use.
type Engine struct {
	pool     *pgxpool.Pool
	opts     Options
	obs      Observer
	log      *slog.Logger
	store    *store
	resume   map[string]resumer // by operation ID, for the background completer
	ops      []*Operation       // operations with a completer, in registration order
	policies sync.Map           // *Operation -> Policy, validated, defaults applied
	cache    *replayCache       // completed responses; nil when disabled
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
	if opts.DerivedKeyLength != 0 && (opts.DerivedKeyLength < 20 || opts.DerivedKeyLength > MaxDerivedKeyLength) {
		return nil, fmt.Errorf("idem: DerivedKeyLength %d is outside 20..%d", opts.DerivedKeyLength, MaxDerivedKeyLength)
	}
	if opts.ReplayCacheBytes == 0 {
		opts.ReplayCacheBytes = DefaultReplayCacheBytes
	}
	switch {
	case opts.ReplayCacheTTL == 0:
		opts.ReplayCacheTTL = DefaultReplayCacheTTL
	case opts.ReplayCacheTTL < 0:
		return nil, fmt.Errorf("idem: ReplayCacheTTL %v is negative", opts.ReplayCacheTTL)
	}
	if opts.ClaimWait <= 0 {
		opts.ClaimWait = DefaultClaimWait
	}
	if err := (Policy{Claim: opts.Claim}).Validate(); err != nil {
		return nil, fmt.Errorf("idem: Options.Claim: %w", err)
	}
	switch {
	case opts.CompleterAttempts == 0:
		opts.CompleterAttempts = DefaultCompleterAttempts
	case opts.CompleterAttempts < 0:
		return nil, fmt.Errorf("idem: CompleterAttempts %d is negative", opts.CompleterAttempts)
	}
	st, err := newStore(pool, opts.Schema, opts.ClaimWait)
	if err != nil {
		return nil, err
	}
	e := &Engine{pool: pool, opts: opts, obs: opts.Observer, log: opts.Logger,
		store: st, resume: map[string]resumer{}, cache: newReplayCache(opts.ReplayCacheBytes)}
	if e.obs == nil {
		e.obs = nopObserver{}
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	return e, nil
}

// Register validates the policies of ops, so that a bad policy (a lease
// under a second, a retention not longer than the lease, a framing header
// in the replay list) is an error when the service starts rather than at
// its first request. Run validates an unregistered operation on first use.
func (e *Engine) Register(ops ...*Operation) error {
	var errs []error
	for _, op := range ops {
		if _, err := e.policy(op); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// policy returns op's validated policy with its defaults applied.
func (e *Engine) policy(op *Operation) (Policy, error) {
	if p, ok := e.policies.Load(op); ok {
		return p.(Policy), nil
	}
	if op.ID == "" {
		return Policy{}, errors.New("idem: an operation needs an ID")
	}
	p := op.Policy.withDefaults()
	if err := p.Validate(); err != nil {
		return Policy{}, fmt.Errorf("idem: operation %s: %w", op.ID, err)
	}
	e.policies.Store(op, p)
	return p, nil
}

// Pool returns the engine's pool.
func (e *Engine) Pool() *pgxpool.Pool { return e.pool }

// PolicyURL returns the configured policy link, if any.
func (e *Engine) PolicyURL() string { return e.opts.PolicyURL }

// Observe reports an event to the engine's observer. Adapters use it for the
// errors they detect before reaching the engine (missing or bad keys).
func (e *Engine) Observe(ev Event) { e.observe(context.Background(), ev) }

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
func Run[S any](ctx context.Context, e *Engine, op *Operation, req Request, phases []Phase[S]) (out *Outcome, err error) {
	if err := checkPhases(phases); err != nil {
		return nil, err
	}
	p, err := e.policy(op)
	if err != nil {
		return nil, err
	}
	if err := CheckScope(req.Scope); err != nil {
		return nil, err
	}
	if p.Claim == ClaimAuto && e.opts.Claim != ClaimLast {
		// An engine-wide ClaimLast is what auto does already.
		p.Claim = e.opts.Claim
	}
	mode, err := claimMode(p, phases)
	if err != nil {
		return nil, fmt.Errorf("idem: operation %s: %w", op.ID, err)
	}
	ctx, end := e.start(ctx, Step{Kind: StepRequest, Operation: op.ID})
	defer func() { end(err) }()
	for attempt := 0; ; attempt++ {
		claimCtx, endClaim := e.start(ctx, Step{Kind: StepClaim, Operation: op.ID})
		c, out, err := e.claim(claimCtx, op, p, mode, req)
		endClaim(err)
		if err != nil || out != nil {
			return out, err
		}
		c.ctx = context.WithoutCancel(ctx)
		out, err = execute(c.ctx, e, c, phases)
		if !errors.Is(err, errLostRace) && !errors.Is(err, errStale) {
			return out, err
		}
		// A concurrent duplicate committed first and this execution rolled
		// back: the claim, decided again, replays its answer. Or the commit
		// met a stale statement: decided again, the claim resumes from the
		// record (or claims afresh), with the statement prepared anew.
		if attempt == maxAttempts && errors.Is(err, errStale) {
			return nil, unavailable("commit", err)
		}
		if attempt == maxAttempts {
			e.observe(ctx, Event{Kind: EventInFlight, Operation: op.ID})
			return nil, &Error{Kind: idemtype.KindInFlight, RetryAfter: time.Second, Detail: "the key is contended; retry later", Err: err}
		}
	}
}

// maxAttempts bounds how often an execution looks at a key again after
// finding it changed under it.
const maxAttempts = 5

// claimMode resolves ClaimAuto for phases.
func claimMode[S any](p Policy, phases []Phase[S]) (ClaimMode, error) {
	local := !slices.ContainsFunc(phases, Phase[S].foreign)
	switch {
	case p.Claim == ClaimAuto && local:
		return ClaimLast, nil
	case p.Claim == ClaimAuto:
		return ClaimFirst, nil
	case p.Claim == ClaimLast && !local:
		return "", errors.New("claim: last needs phases that are all local")
	}
	return p.Claim, nil
}

// MaxScopeLength bounds a scope value (a principal, a header's value), in bytes.
const MaxScopeLength = 255

// CheckScope refuses a scope value the store cannot hold or index well:
// invalid UTF-8, a NUL character, or more than MaxScopeLength bytes. The
// error is an *Error of kind idemtype.KindInvalidScope (400).
func CheckScope(scope string) error {
	switch {
	case len(scope) > MaxScopeLength:
		return errorf(idemtype.KindInvalidScope, "the scope value is %d bytes long; at most %d are allowed", len(scope), MaxScopeLength)
	case !utf8.ValidString(scope):
		return errorf(idemtype.KindInvalidScope, "the scope value is not valid UTF-8")
	case strings.IndexByte(scope, 0) >= 0:
		return errorf(idemtype.KindInvalidScope, "the scope value contains a NUL character")
	}
	return nil
}

// Call is the idempotent request an execution serves. Phases read it from
// their context with CallFrom, on the request path and in the background
// completer alike: identity that a phase needs (the tenant a row belongs to)
// comes from here, not from values a middleware put in the request's
// context, which the completer does not have.
type Call struct {
	Operation string // the operationId
	Namespace string // the key namespace (the group, or the operationId)
	Scope     string // the resolved scope value: the principal, a header's value, or "" for global
	Key       string // the client's idempotency key
	Resumed   bool   // the execution continues from an earlier one's recovery point
	// Background is set when the completer runs the execution, with no
	// client waiting for it.
	Background bool
}

type callKey struct{}

// CallFrom returns the call an execution serves, or nil outside one.
func CallFrom(ctx context.Context) *Call {
	c, _ := ctx.Value(callKey{}).(*Call)
	return c
}

// Test hooks, nil outside tests: they stop an execution where a race
// matters, so that a test can drive the race deterministically.
var (
	hookAfterRead func() // claim: a conflicting record was read, nothing decided yet
	hookAfterEnd  func() // execute: the outcome is stored, released or yielded
)

// claim is an execution's hold on a record.
type claim struct {
	op       *Operation
	policy   Policy
	ns       string
	scope    string
	key      string
	id       [16]byte // recordID(ns, scope, key)
	token    [16]byte
	recovery string          // last committed phase, "" for none
	state    json.RawMessage // state saved with the recovery point
	resumed  bool
	// fingerprint and derivation determine the derived keys of foreign phases.
	fingerprint []byte
	derivation  KeyDerivation
	background  bool     // run by the completer
	keeper      *keeper  // refreshes the lease while the execution runs
	sess        *session // the open transaction of an inline claim, until it commits
	// last: the execution runs ClaimLast, in c.sess, with no record yet.
	last bool
	// ctx is the request's context, detached from its cancellation: the
	// execution's events and logs carry it (its trace) to the end.
	ctx context.Context
	// call is what CallFrom returns to the phases (here, not allocated on
	// its own).
	call Call
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
func (e *Engine) claim(ctx context.Context, op *Operation, p Policy, mode ClaimMode, req Request) (*claim, *Outcome, error) {
	c := &claim{op: op, policy: p, ns: op.namespace(), scope: req.Scope, key: req.Key, token: newToken(), ctx: ctx,
		fingerprint: req.Fingerprint, derivation: CurrentKeyDerivation}
	if ent := e.cache.get(cacheKey{c.ns, c.scope, c.key}); ent != nil {
		// A completed record, answered from memory: it cannot have changed.
		if err := e.mismatch(ctx, op, ent.operation, ent.fingerprint, req.Fingerprint); err != nil {
			return nil, nil, err
		}
		e.observe(ctx, Event{Kind: EventReplay, Operation: op.ID})
		return nil, &Outcome{Response: ent.resp, Replayed: true}, nil
	}
	c.id = recordID(c.ns, c.scope, c.key)
	var payload []byte
	if p.Complete == idemtype.CompleteBackground {
		payload = req.Payload
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		var rec *record
		switch mode {
		case ClaimLast:
			open, r, err := e.beginLast(ctx, c)
			if err != nil {
				return nil, nil, err
			}
			if open {
				e.observe(ctx, Event{Kind: EventClaim, Operation: op.ID})
				return c, nil, nil
			}
			rec = r
		case ClaimFirst:
			claimed, r, err := e.claimFirst(ctx, c, payload)
			if err != nil {
				return nil, nil, err
			}
			if claimed {
				e.observe(ctx, Event{Kind: EventClaim, Operation: op.ID})
				return c, nil, nil
			}
			rec = r
		default:
			var inserted bool
			err := againIfStale(func() (err error) {
				inserted, err = e.store.claim(ctx, e.opts.AsyncClaimCommit, c, payload)
				return err
			})
			if err != nil {
				return nil, nil, unavailable("claim", err)
			}
			if inserted {
				e.observe(ctx, Event{Kind: EventClaim, Operation: op.ID})
				return c, nil, nil
			}
		}
		var err error
		if rec == nil {
			// A separate claim reads what holds the key; the others read
			// again only if the holder committed while they looked.
			err = againIfStale(func() (err error) {
				rec, err = e.store.read(ctx, e.pool, c.id)
				return err
			})
		}
		if hookAfterRead != nil {
			hookAfterRead()
		}
		if errors.Is(err, pgx.ErrNoRows) {
			continue // released or pruned since the insert: try again
		}
		if err != nil {
			return nil, nil, unavailable("reading the existing record", err)
		}
		if rec.pastRetention && (rec.state == stateCompleted || !rec.live) {
			// Past retention: the key is free again, unless the delete's own
			// predicates find the owner live again or a committed phase.
			freed, err := e.store.deleteExpired(ctx, c.id)
			if err != nil {
				return nil, nil, unavailable("freeing an expired record", err)
			}
			if freed {
				continue
			}
		}
		if err := e.mismatch(ctx, op, rec.operation, rec.fingerprint, req.Fingerprint); err != nil {
			return nil, nil, err
		}
		switch {
		case rec.state == stateCompleted:
			e.observe(ctx, Event{Kind: EventReplay, Operation: op.ID})
			resp := e.replay(rec)
			e.cache.put(cacheKey{c.ns, c.scope, c.key}, rec.operation, rec.fingerprint, resp, time.Now().Add(min(rec.expiresIn, e.opts.ReplayCacheTTL)))
			return nil, &Outcome{Response: resp, Replayed: true}, nil
		case rec.live:
			e.observe(ctx, Event{Kind: EventInFlight, Operation: op.ID})
			return nil, nil, inFlight(rec.retryAfter, nil)
		}
		var ok bool
		err = againIfStale(func() (err error) {
			ok, err = e.store.takeover(ctx, c, rec.owner)
			return err
		})
		if err != nil {
			return nil, nil, unavailable("takeover", err)
		}
		if ok {
			e.observe(ctx, Event{Kind: EventTakeover, Operation: op.ID})
			return c, nil, nil
		}
		// The owner refreshed, or someone else took it over or finished it
		// first: look again.
	}
	e.observe(ctx, Event{Kind: EventInFlight, Operation: op.ID})
	return nil, nil, &Error{Kind: idemtype.KindInFlight, RetryAfter: time.Second, Detail: "the key is contended; retry later"}
}

// mismatch reports a key first used by another operation of its group, or
// with another request: 422. A completed record keeps no operation (recOp
// is ""): its fingerprint is receiptFingerprint's, which covers both.
func (e *Engine) mismatch(ctx context.Context, op *Operation, recOp string, recFP, fp []byte) error {
	if recOp == "" && string(recFP) == string(receiptFingerprint(op.ID, fp)) ||
		recOp == op.ID && string(recFP) == string(fp) {
		return nil
	}
	e.observe(ctx, Event{Kind: EventMismatch, Operation: op.ID})
	detail := "this key was first used with a different request"
	switch {
	case recOp == "":
		detail = "this key was first used with a different request, or for another operation"
	case recOp != op.ID:
		detail = fmt.Sprintf("this key was first used for operation %s", recOp)
	}
	return &Error{Kind: idemtype.KindMismatch, Detail: detail}
}

// remember caches a response this execution just stored. Its expiry is
// counted from before the commit, less a margin for the clocks of this
// process and of the database to disagree, so that it is never served
// after the record's own expires_at.
func (e *Engine) remember(c *claim, resp *Response, omitted bool, since time.Time) {
	if omitted {
		return
	}
	skew := min(c.policy.Retention/10, time.Minute)
	e.cache.put(cacheKey{c.ns, c.scope, c.key}, c.op.ID, c.fingerprint, resp, since.Add(min(c.policy.Retention-skew, e.opts.ReplayCacheTTL)))
}

// claimFirst claims c's key in a transaction left open on a connection of
// its own (c.sess), in one round trip; see queries.claimFirst. When the key
// is held, it returns what holds it instead (nil if that must be read
// again), and the connection is back in the pool.
func (e *Engine) claimFirst(ctx context.Context, c *claim, payload []byte) (bool, *record, error) {
	var rec *record
	err := againIfStale(func() error {
		pc, err := e.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		sess := newSession(pc)
		tx, r, err := e.store.claimInTx(ctx, pc.Conn(), c, payload)
		if tx != nil {
			sess.tx.tx = tx
			c.sess = sess
			return nil
		}
		sess.end() // rolls back what the claim began
		rec = r
		return err
	})
	switch {
	case c.sess != nil:
		return true, nil, nil
	case sqlState(err) == lockNotAvailable: // a concurrent claim is still uncommitted
		e.observe(ctx, Event{Kind: EventInFlight, Operation: c.op.ID})
		return false, nil, inFlight(time.Second, nil)
	case err != nil:
		return false, nil, unavailable("claim", err)
	}
	return false, rec, nil
}

// beginLast starts a ClaimLast execution: one round trip reads the record
// on a connection of its own. When none holds the key, c.sess holds that
// connection with the transaction still to begin: BEGIN travels with the
// phases' first statement (see phaseTx), so it costs no round trip of its
// own. Otherwise it returns the record, and the connection is back in the
// pool: a replay costs that one read, and no error.
func (e *Engine) beginLast(ctx context.Context, c *claim) (bool, *record, error) {
	pc, err := e.pool.Acquire(ctx)
	if err != nil {
		return false, nil, unavailable("claim", err)
	}
	var rec *record
	err = againIfStale(func() (err error) {
		rec, err = e.store.read(ctx, pc.Conn(), c.id)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		c.sess, c.last = newSession(pc), true
		return true, nil, nil
	}
	pc.Release()
	if err != nil {
		return false, nil, unavailable("claim", err)
	}
	return false, rec, nil
}

// againIfStale runs f, and once more if it failed because a statement pgx
// had prepared no longer fits the tables (a column changed type: "cached
// plan must not change result type") or is gone (DEALLOCATE ALL, a pooler
// that lost it). pgx's statement cache forgets such a statement when it
// fails, so the second run prepares it afresh. f must be safe to run again
// after such a failure: a read, or a round trip that committed nothing.
func againIfStale(f func() error) error {
	err := f()
	if stale(err) {
		err = f()
	}
	return err
}

// replay returns a completed record's stored response, or, when its body
// was too large to store, the response-not-stored problem: never a success
// with its body silently missing.
func (e *Engine) replay(rec *record) *Response {
	if !rec.bodyOmitted {
		return rec.response()
	}
	status := 0
	if rec.status != nil {
		status = *rec.status
	}
	return ProblemResponse(&Error{Kind: idemtype.KindNotStored, Detail: fmt.Sprintf(
		"the request completed with status %d, but its response body exceeded the replay limit and was not stored", status)},
		e.opts.PolicyURL)
}

// inFlight is the 409 for a key that another execution holds, uncommitted
// or live: the client retries after retryAfter.
func inFlight(retryAfter time.Duration, err error) *Error {
	return &Error{Kind: idemtype.KindInFlight, RetryAfter: retryAfter, Err: err,
		Detail: "another request with this key is being processed; retry later"}
}

// unavailable reports a store failure: before anything was claimed, or on
// a last-mode commit whose outcome is unknown. Either way the client may
// retry at once; the retry finds out.
func unavailable(step string, err error) *Error {
	return &Error{Kind: idemtype.KindUnavailable, RetryAfter: time.Second, Detail: "the idempotency store did not answer (" + step + ")", Err: err}
}

// execute runs the phases after c's recovery point.
func execute[S any](ctx context.Context, e *Engine, c *claim, phases []Phase[S]) (*Outcome, error) {
	// An inline claim's transaction that never committed (an error, a panic,
	// an execution that died in runtime.Goexit) is rolled back.
	defer c.sess.end()
	var state S
	start := 0
	if c.recovery != "" {
		i := phaseIndex(phases, c.recovery)
		if i < 0 {
			// The operation's phases changed under a live record: keep it for
			// an operator rather than guess.
			e.yield(c)
			return nil, &Error{Kind: idemtype.KindFailed, Err: fmt.Errorf("recovery point %q is not a phase of %s", c.recovery, c.op.ID)}
		}
		start = i + 1
	}
	if len(c.state) > 0 {
		if err := json.Unmarshal(c.state, &state); err != nil {
			e.yield(c)
			return nil, &Error{Kind: idemtype.KindFailed, Err: fmt.Errorf("decoding stored phase state: %w", err)}
		}
	}
	if c.resumed {
		e.observe(ctx, Event{Kind: EventResume, Operation: c.op.ID})
	}

	c.call = Call{Operation: c.op.ID, Namespace: c.ns, Scope: c.scope, Key: c.key, Resumed: c.resumed, Background: c.background}
	ctx = context.WithValue(ctx, callKey{}, &c.call)

	committed := c.recovery != "" // a local phase of this record has committed
	foreignTried := false         // a foreign call may have had an effect
	i := start
	if c.sess != nil {
		// The claim is not committed yet: the local phases up to the first
		// foreign one run in its transaction and commit with it, once.
		j := i
		for j < len(phases) && !phases[j].foreign() {
			j++
		}
		resp, err := runInline(ctx, e, c, phases[i:j], &state)
		c.sess.end()
		c.sess = nil
		var unknown *commitUnknownError
		switch {
		case errors.As(err, &unknown):
			// Either all of it committed or nothing did.
			return e.fail(c, false, false, err)
		case c.last && err != nil && !errors.Is(err, errLostRace) && !errors.Is(err, errStale) && e.takenMeanwhile(c):
			// The phases may have failed on a concurrent duplicate's rows:
			// its answer is the one to give.
			return nil, errLostRace
		case errors.Is(err, errLostRace), errors.Is(err, errStale):
			return nil, err
		case err != nil:
			// Rolled back, or refused by the server: no record and no
			// effect remain.
			e.observe(ctx, Event{Kind: EventRelease, Operation: c.op.ID})
			if hookAfterEnd != nil {
				hookAfterEnd()
			}
			return nil, err
		case resp != nil:
			e.observe(ctx, Event{Kind: EventComplete, Operation: c.op.ID})
			if hookAfterEnd != nil {
				hookAfterEnd()
			}
			return &Outcome{Response: resp, Resumed: c.resumed}, nil
		}
		if j > i {
			committed, c.recovery = true, phases[j-1].Name
		}
		i = j
	}
	ctx, c.keeper = e.keepLease(ctx, c)
	defer c.keeper.close()
	for ; i < len(phases); i++ {
		p := phases[i]
		began := time.Now()
		var resp *Response
		pctx, endPhase := e.start(ctx, Step{Kind: StepPhase, Operation: c.op.ID, Phase: p.Name, Background: c.background})
		err := recovered(p.Name, func() error {
			var err error
			switch {
			case p.foreign():
				foreignTried = true
				key := DeriveKey(c.derivation, c.ns, c.scope, c.key, p.Name, c.fingerprint, e.opts.DerivedKeyLength)
				err = p.Foreign(pctx, key, &state)
			default:
				resp, err = e.commitPhase(pctx, c, p.Name, &state, func(tx pgx.Tx) (*Response, error) {
					if p.Final != nil {
						return p.Final(pctx, tx, &state)
					}
					return nil, p.Local(pctx, tx, &state)
				})
			}
			return err
		})
		if err != nil && errors.Is(context.Cause(ctx), ErrFenced) {
			err = ErrFenced // whatever the phase saw, the cause is the lost lease
		}
		e.observe(pctx, Event{Kind: EventPhase, Operation: c.op.ID, Phase: p.Name, Duration: time.Since(began), Err: err})
		endPhase(err)
		if err != nil {
			e.logPanic(pctx, c, p.Name, err)
			return e.fail(c, committed, foreignTried, err)
		}
		if resp != nil {
			e.observe(ctx, Event{Kind: EventComplete, Operation: c.op.ID})
			if hookAfterEnd != nil {
				hookAfterEnd()
			}
			return &Outcome{Response: resp, Resumed: c.resumed}, nil
		}
		if !p.foreign() {
			committed = true
			c.recovery = p.Name
		}
	}
	return nil, errors.New("idem: the last phase returned no response")
}

// runInline runs local phases in the open transaction of c's inline claim,
// bounded by the lease, then stores the progress (or the final response) and
// commits in one round trip. An error is the phases', or the commit's as
// commitLast and commitWith classify it: a *commitUnknownError when the
// COMMIT may have taken effect; otherwise nothing committed.
func runInline[S any](ctx context.Context, e *Engine, c *claim, phases []Phase[S], state *S) (resp *Response, err error) {
	// No record is committed (first mode), or none exists (last mode):
	// nothing bounds this transaction but itself.
	ctx, cancel := context.WithTimeout(ctx, c.policy.Lease)
	defer cancel()
	if len(phases) == 0 {
		// The first phase is foreign: the claim commits alone, before
		// anything outside the database happens.
		return nil, e.store.commitClaim(ctx, c.sess.tx.conn, e.opts.AsyncClaimCommit)
	}
	for _, p := range phases {
		began := time.Now()
		pctx, endPhase := e.start(ctx, Step{Kind: StepPhase, Operation: c.op.ID, Phase: p.Name, Background: c.background})
		err := recovered(p.Name, func() error {
			if p.Final == nil {
				return p.Local(pctx, &c.sess.tx, state)
			}
			var err error
			resp, err = p.Final(pctx, &c.sess.tx, state)
			if err == nil && resp == nil {
				err = fmt.Errorf("idem: final phase %s returned no response", p.Name)
			}
			return err
		})
		e.observe(pctx, Event{Kind: EventPhase, Operation: c.op.ID, Phase: p.Name, Duration: time.Since(began), Err: err})
		endPhase(err)
		if err != nil {
			e.logPanic(pctx, c, p.Name, err)
			return nil, err
		}
	}
	var st []byte
	if !c.last {
		// A completed record is never resumed: only progress needs state.
		if st, err = json.Marshal(state); err != nil {
			return nil, fmt.Errorf("idem: encoding phase state: %w", err)
		}
	}
	omitted := false
	if resp != nil {
		resp = &Response{Status: resp.Status, Header: c.policy.storedHeaders(resp.Header), Body: resp.Body}
		omitted = len(resp.Body) > c.policy.MaxReplayBody
	}
	since := time.Now()
	if c.last {
		err = e.store.commitRecord(ctx, c.sess.tx.conn, c.sess.tx.tx == nil, c, resp, omitted)
		if kindOf(err) == idemtype.KindInFlight {
			e.observe(ctx, Event{Kind: EventInFlight, Operation: c.op.ID})
		}
	} else {
		err = e.commit(ctx, c.sess.tx.conn, c, phases[len(phases)-1].Name, st, resp, omitted)
	}
	if err != nil {
		return nil, err
	}
	if resp != nil {
		e.remember(c, resp, omitted, since)
	}
	return resp, nil
}

// kindOf is the kind of err's *Error, or "".
func kindOf(err error) idemtype.ErrorKind {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Kind
	}
	return ""
}

// takenMeanwhile reports whether a record now holds c's key, after c's
// ClaimLast execution failed and rolled back.
func (e *Engine) takenMeanwhile(c *claim) bool {
	_, err := e.store.read(context.Background(), e.pool, c.id)
	return err == nil
}

func (e *Engine) logPanic(ctx context.Context, c *claim, phase string, err error) {
	var pe *PanicError
	if errors.As(err, &pe) {
		e.log.ErrorContext(ctx, "idem: a phase panicked", "operation", c.op.ID, "phase", phase, "panic", pe.Value, "stack", string(pe.Stack))
	}
}

// PanicError is a panic in a phase, recovered by the engine and treated as
// the phase's error: the claim is released when nothing was committed, and
// the failure is ambiguous otherwise.
type PanicError struct {
	Phase string
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("idem: phase %s panicked: %v", e.Phase, e.Value)
}

// recovered runs f and turns a panic into a *PanicError. (runtime.Goexit is
// not a panic and goes through.)
func recovered(phase string, f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Phase: phase, Value: v, Stack: debug.Stack()}
		}
	}()
	return f()
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
	sess, err := e.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer sess.end()
	resp, err := run(&sess.tx)
	if err != nil {
		return nil, err
	}
	st, err := json.Marshal(state)
	if err != nil {
		return nil, fmt.Errorf("idem: encoding phase state after %s: %w", name, err)
	}
	omitted := false
	if resp != nil {
		// The answer goes out exactly as it is stored (the allowed headers
		// only), so that it and every replay are byte-identical. A body too
		// large to store still goes out in full this once.
		resp = &Response{Status: resp.Status, Header: c.policy.storedHeaders(resp.Header), Body: resp.Body}
		omitted = len(resp.Body) > c.policy.MaxReplayBody
		// No refresh may land after the completion: it would find the
		// record completed and report a spurious fence.
		c.keeper.stop()
	}
	since := time.Now()
	if err := e.commit(ctx, sess.tx.conn, c, name, st, resp, omitted); err != nil {
		return nil, err
	}
	if resp != nil {
		e.remember(c, resp, omitted, since)
	}
	return resp, nil
}

// fail applies the outcome rules to a failed phase.
func (e *Engine) fail(c *claim, committed, foreignTried bool, err error) (*Outcome, error) {
	ctx := c.ctx
	// Whatever happens next (release, yield, a stored failure), no refresh
	// may land after it.
	c.keeper.stop()
	var rel *ReleaseError
	var protoErr *Error
	var unknown *commitUnknownError
	// The phase declared the failure effect-free: a release, or a protocol
	// error such as the not-implemented stub.
	declared := errors.As(err, &rel) || errors.As(err, &protoErr)
	switch {
	case errors.As(err, &unknown):
		// The phase's COMMIT may have taken effect: nothing is released or
		// stored as if it had not. The next attempt, or the completer, finds
		// out from the record, at once: the lease is given back (a last-mode
		// execution has no lease; its record, if any, is complete).
		e.observe(ctx, Event{Kind: EventAmbiguous, Operation: c.op.ID})
		if !c.last {
			e.yield(c)
		}
		if hookAfterEnd != nil {
			hookAfterEnd()
		}
		return nil, unavailable("commit", err)
	case errors.Is(err, errStale):
		// Nothing of this transaction committed. The execution is decided
		// again (Run), as a retry would: from no record, or from the record's
		// recovery point, whose lease is given back for that. The completer
		// decides nothing again: it gives the lease back, and its next pass
		// takes the record over, stored request and all.
		if !committed && !foreignTried && !c.background {
			if _, derr := e.store.release(ctx, c); derr == nil {
				return nil, err
			}
		}
		e.yield(c)
		return nil, err
	case errors.Is(err, ErrFenced):
		e.observe(ctx, Event{Kind: EventFenced, Operation: c.op.ID})
		return nil, &Error{Kind: idemtype.KindInFlight, RetryAfter: time.Second, Err: err,
			Detail: "another execution took this key over; retry to get its result"}
	case !committed && (declared || !foreignTried):
		// Nothing of this execution was committed and, unless the phase said
		// so, no foreign call was attempted: no effect exists. The release
		// is conditional on the recovery point: a commit that failed only in
		// its acknowledgement leaves the record in place, as ambiguous.
		released, derr := e.store.release(ctx, c)
		if derr != nil {
			e.log.WarnContext(ctx, "idem: release failed; the claim expires with its lease", "operation", c.op.ID, "err", derr)
		}
		if released || derr != nil {
			e.observe(ctx, Event{Kind: EventRelease, Operation: c.op.ID})
			if hookAfterEnd != nil {
				hookAfterEnd()
			}
			return nil, err
		}
	case declared:
		e.log.WarnContext(ctx, "idem: release refused: a phase had committed; treating the failure as ambiguous",
			"operation", c.op.ID, "recovery_point", c.recovery, "err", err)
	}
	e.observe(ctx, Event{Kind: EventAmbiguous, Operation: c.op.ID})
	failure := &Error{Kind: idemtype.KindFailed, Err: err}
	if c.policy.Ambiguous == idemtype.AmbiguousStore {
		resp := ProblemResponse(failure, e.opts.PolicyURL)
		resp.Header = c.policy.storedHeaders(resp.Header) // sent as stored
		serr := e.storeFailure(ctx, c, resp)
		if serr == nil {
			e.observe(ctx, Event{Kind: EventComplete, Operation: c.op.ID})
			return &Outcome{Response: resp}, nil
		}
		if errors.Is(serr, ErrFenced) {
			e.observe(ctx, Event{Kind: EventFenced, Operation: c.op.ID})
		}
	}
	e.yield(c)
	if hookAfterEnd != nil {
		hookAfterEnd()
	}
	return nil, failure
}

// commit stores c's progress (phase and state) or, with resp, its
// response, and commits the transaction open on conn.
func (e *Engine) commit(ctx context.Context, conn *pgx.Conn, c *claim, phase string, state []byte, resp *Response, omitted bool) error {
	if resp != nil {
		return e.store.commitResponse(ctx, conn, c, resp, omitted)
	}
	return e.store.commitProgress(ctx, conn, c, phase, state)
}

func (e *Engine) storeFailure(ctx context.Context, c *claim, resp *Response) error {
	sess, err := e.begin(ctx)
	if err != nil {
		return err
	}
	defer sess.end()
	return e.commit(ctx, sess.tx.conn, c, c.recovery, c.state, resp, false)
}

// yield gives up c's lease at once, so a retry can resume without waiting
// for it to expire.
func (e *Engine) yield(c *claim) {
	if err := e.store.yield(context.WithoutCancel(c.ctx), c); err != nil {
		e.log.WarnContext(c.ctx, "idem: giving up the lease failed; it expires by itself", "operation", c.op.ID, "err", err)
	}
}

// keeper refreshes a claim's lease every third of its length while the
// execution runs. It arms a timer rather than a goroutine, so an execution
// shorter than a third of the lease costs no refresh at all. If a refresh
// finds the lease taken over, the execution's context is cancelled with
// cause ErrFenced.
type keeper struct {
	e        *Engine
	c        *claim
	every    time.Duration
	cancel   context.CancelCauseFunc
	mu       sync.Mutex
	timer    *time.Timer
	stopped  bool
	inflight sync.WaitGroup
}

func (e *Engine) keepLease(parent context.Context, c *claim) (context.Context, *keeper) {
	ctx, cancel := context.WithCancelCause(parent)
	k := &keeper{e: e, c: c, every: c.policy.Lease / 3, cancel: cancel}
	k.mu.Lock()
	k.timer = time.AfterFunc(k.every, k.refresh)
	k.mu.Unlock()
	return ctx, k
}

func (k *keeper) refresh() {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	k.inflight.Add(1)
	k.mu.Unlock()
	defer k.inflight.Done()
	// A renewal that takes longer than its interval is useless: give up on
	// it rather than hold up the execution's end.
	ctx, cancel := context.WithTimeout(context.Background(), k.every)
	ok, err := k.e.store.refresh(ctx, k.c)
	cancel()
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.stopped:
	case err != nil:
		k.e.log.WarnContext(k.c.ctx, "idem: lease refresh failed", "operation", k.c.op.ID, "err", err)
		k.timer.Reset(k.every)
	case !ok:
		k.e.observe(k.c.ctx, Event{Kind: EventFenced, Operation: k.c.op.ID})
		k.cancel(ErrFenced)
	default:
		k.timer.Reset(k.every)
	}
}

// stop ends the refreshes and waits for one in flight. It is safe to call
// more than once, and on a nil keeper.
func (k *keeper) stop() {
	if k == nil {
		return
	}
	k.mu.Lock()
	k.stopped = true
	k.timer.Stop()
	k.mu.Unlock()
	k.inflight.Wait()
}

// close stops the keeper and releases its context.
func (k *keeper) close() {
	k.stop()
	k.cancel(nil)
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
			if err := p.Foreign(ctx, DeriveKey(CurrentKeyDerivation, op.namespace(), "", string(nonce[:]), p.Name, nil, e.opts.DerivedKeyLength), &state); err != nil {
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
