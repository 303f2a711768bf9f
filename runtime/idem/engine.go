// Package idem is the idempotency engine that generated handlers call: it
// claims keys in PostgreSQL, runs an operation's phases under a fenced lease,
// records recovery points, stores responses and replays them.
//
// The guarantee, per (namespace, scope, key) within the retention window: at
// most one execution commits each local phase, every execution that reaches
// the end stores the same response that all later requests replay, and an
// execution whose owner lost its lease commits nothing more. See
// docs/runtime.md for the guarantees and the non-guarantees, and
// docs/internals.md for the argument.
package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemapi"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Options configure an Engine.
type Options struct {
	// Schema holds the engine's tables (see idemmigrate). Default "idemgen".
	Schema string
	// Observer receives events for metrics. Default: none. A
	// ContextObserver also gets each event's context.
	Observer Observer
	// Tracer is told when each request, its claim and its phases begin and
	// end (runtime/idemotel makes spans of them). Default: none.
	Tracer Tracer
	// Logger receives warnings (failed lease refreshes and releases) and
	// one line per failed execution ("idem: execution failed": operation,
	// scope, key, phase, recovery point, resumed, outcome, err and its
	// SQLSTATE; Info when the key was released, Error otherwise; see
	// PhaseError). Default: slog.Default().
	Logger *slog.Logger
	// AsyncClaimCommit commits with synchronous_commit=off the claims that
	// commit on their own: every claim in ClaimSeparate, and a ClaimFirst
	// claim whose first phase is foreign. A claim lost in a crash had no
	// effects, and the first local phase's durable commit flushes the WAL
	// that holds it; see docs/reliability.md, "AsyncClaimCommit under
	// failover". A claim that commits with local
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
	// PoolHeadroom is how many of the pool's connections no execution
	// holds while the operation's code runs (default 1; negative: no
	// bound): an execution holds a connection across its local phases or
	// its handler, and code that also queries the pool directly (a lookup
	// behind the service's own interface) then finds one free, whatever the
	// concurrency. At most MaxConns - PoolHeadroom executions hold one at
	// once (at least 1); the others wait for a turn without a connection.
	PoolHeadroom int
	// PoolWait bounds how long an execution waits for its turn and its
	// connection (default 5s): past it, the request is answered 503 with
	// Retry-After, and the exhausted pool is logged once until it has room
	// again.
	PoolWait time.Duration
	// DerivedKeyLength is the length of derived keys for foreign phases,
	// 20 to 64 (default 64), for foreign systems with smaller limits.
	DerivedKeyLength int
	// Contract is the API's contract with its clients on every answer of
	// an idempotent operation: the headers they read (a request id, the
	// key echoed, a replay's original request, whether a refusal is worth
	// a retry), how refusals are rendered (RFC 9457 problem+json by
	// default, or the service's own error object), and the policy linked
	// from them. What it renders for a failure the engine stores is stored
	// and replayed. runtime/idempreset has vendors' contracts (Stripe's).
	// The zero Contract sends problem+json and none of the headers.
	Contract idemapi.Contract
	// RedactScope is how a scope appears in the engine's and the adapters'
	// log lines: a scope is often a credential (an API key as the
	// principal). Default: idemadmin.ScopeDigest's first 16 hex digits, "sha256:"
	// before them, the same for every line of one scope and none of its
	// text.
	RedactScope func(scope string) string
	// Claim is the claim mode of operations whose policy leaves it to
	// ClaimAuto (default: ClaimAuto itself, see ClaimMode). ClaimLast here
	// applies to operations whose phases are all local; the others claim
	// first.
	Claim ClaimMode
	// SameRequestWindow is how long a claimed request (operation, scope,
	// fingerprint) is remembered, so that a new key claimed for the same
	// request within it is observed (EventSameRequestNewKey): a client that
	// mints a key per attempt. Default DefaultSameRequestWindow; negative
	// turns it off. The memory is fixed (sameRequestSlots slots); a slot
	// another request takes over is forgotten, never mistaken.
	SameRequestWindow time.Duration
	// CompleterAttempts bounds a record's attempts (its claim and every
	// takeover, by retries and the background completer together): the
	// completer takes over only a record with fewer, and leaves the rest to
	// an operator (see Abandoned). Default 5.
	CompleterAttempts int
}

// DefaultCompleterAttempts is Options.CompleterAttempts' default.
const DefaultCompleterAttempts = 5

// DefaultSameRequestWindow is Options.SameRequestWindow's default.
const DefaultSameRequestWindow = time.Minute

// DefaultReplayCacheTTL is Options.ReplayCacheTTL's default.
const DefaultReplayCacheTTL = time.Minute

// DefaultClaimWait is Options.ClaimWait's default.
const DefaultClaimWait = 2 * time.Second

// rollbackTimeout bounds the ROLLBACK that ends an abandoned transaction.
const rollbackTimeout = 5 * time.Second

// DefaultSchema is the schema the engine's tables live in unless configured
// (Options.Schema); idemmigrate creates them.
const DefaultSchema = idemmigrate.DefaultSchema

// Engine runs idempotent executions. It is safe for concurrent use.
type Engine struct {
	pool      *pgxpool.Pool
	opts      Options
	obs       Observer
	log       *slog.Logger
	store     *store
	resume    map[string]resumer // by operation ID, for the background completer
	ops       []*Operation       // operations with a completer, in registration order
	policies  sync.Map           // *Operation -> Policy, validated, defaults applied
	cache     *replayCache       // completed responses; nil when disabled
	requests  *requestSketch     // recently claimed requests; nil when off
	durations durations          // how long executions take, per operation
	heldKeys  heldRate           // how often ClaimLast claims find their keys held
	waits     *watcher           // duplicates waiting for executions in flight
	held      chan struct{}      // a token per execution holding a connection; nil: unbounded
	exhausted atomic.Bool        // the exhausted pool was logged, and has had no room since
	keyless   sync.Map           // clients EventKeyless named (idemhttp.KeylessClient)
	keylessN  atomic.Int32       // how many
	hooks     testHooks
}

// New returns an engine on pool. The schema must have been migrated (see
// idemmigrate); New does not touch the database.
func New(pool *pgxpool.Pool, opts Options) (*Engine, error) {
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	if err := idemmigrate.CheckSchema(opts.Schema); err != nil {
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
	if opts.SameRequestWindow == 0 {
		opts.SameRequestWindow = DefaultSameRequestWindow
	}
	if err := (Policy{Claim: opts.Claim}).validate(); err != nil {
		return nil, fmt.Errorf("idem: Options.Claim: %w", err)
	}
	switch {
	case opts.CompleterAttempts == 0:
		opts.CompleterAttempts = DefaultCompleterAttempts
	case opts.CompleterAttempts < 0:
		return nil, fmt.Errorf("idem: CompleterAttempts %d is negative", opts.CompleterAttempts)
	}
	if opts.PoolWait <= 0 {
		opts.PoolWait = DefaultPoolWait
	}
	if opts.PoolHeadroom == 0 {
		opts.PoolHeadroom = 1
	}
	st, err := newStore(pool, opts.Schema, opts.ClaimWait)
	if err != nil {
		return nil, err
	}
	e := &Engine{pool: pool, opts: opts, obs: opts.Observer, log: opts.Logger,
		store: st, resume: map[string]resumer{}, cache: newReplayCache(opts.ReplayCacheBytes),
		requests: newRequestSketch(opts.SameRequestWindow)}
	e.waits = newWatcher(e)
	if opts.PoolHeadroom > 0 {
		e.held = make(chan struct{}, max(1, int(pool.Config().MaxConns)-opts.PoolHeadroom))
	}
	if e.obs == nil {
		e.obs = nopObserver{}
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	st.timelineOff = func(ctx context.Context, err error) {
		e.logStoreError(ctx, slog.LevelWarn, "", "the failover signal is off: the store refuses what timeline() reads", err)
	}
	return e, nil
}

// Ready checks that the store answers, and learns which statements its
// records table needs: a plain table's, or a Citus distributed table's
// (docs/scaling.md). The engine does this by itself before its first
// claim, completer pass or prune, and again after a failure; a service
// that calls Ready at startup fails fast when the store is unreachable
// and keeps that one query off its first request.
func (e *Engine) Ready(ctx context.Context) error {
	return e.store.detect(ctx)
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
	if err := p.validate(); err != nil {
		return Policy{}, fmt.Errorf("idem: operation %s: %w", op.ID, err)
	}
	e.policies.Store(op, p)
	return p, nil
}

// KeyedRequest is what identifies one idempotent request: its scope and
// key, and the fingerprint of what it asks.
type KeyedRequest struct {
	Scope       string // resolved scope value ("" for global scope)
	Key         string // the parsed Idempotency-Key
	Fingerprint []byte // SHA-256 of the canonical request
	// Payload is the request as the operation's completer decodes it; stored
	// only for operations completed in the background.
	Payload []byte
	// IntentAge is how old the client says the request's intent is (the
	// Idempotency-Intent-Age header), when IntentAgeSent: observed as
	// EventIntentAge, so that retries arriving near or past the retention
	// show before a duplicate does.
	IntentAge     time.Duration
	IntentAgeSent bool
	// Wait is how long the client is willing to wait for an execution in
	// flight that holds its key (Prefer: wait=N, RFC 7240), when WaitSent:
	// it shortens the policy's wait, never lengthens it.
	Wait     time.Duration
	WaitSent bool
	// ScopePublic says the scope names no secret (the sender of a signed
	// webhook, which the adapter sets): its record keeps the scope itself,
	// not its digest, and the background completer's phases see it in
	// Execution.Scope. Other scopes may be credentials (a secret key as
	// the principal): their records keep only idemadmin.ScopeDigest, and the
	// completer's Execution.Scope is that digest.
	ScopePublic bool
	// Placement is the value the operation places its record by (its
	// tenant's or account's id: Policy's operation declares where it comes
	// from, idemtype.Placement), where the records table is laid out by
	// placement (idemmigrate's DistributeOptions.ColocateWith): the record
	// lives with the service's rows of that value, and keys are unique per
	// placement. "" for an operation that declares none; ignored where the
	// table has no placement column.
	Placement string
	// NaturalKey is the digest of the request values that identify its
	// intent in business terms (idemtype.NaturalKeyDigest of the values the
	// operation's x-idempotency natural-key names). The completed record
	// keeps a digest of it with the record's namespace and scope, so that
	// two callers' same values are two intents, never the values
	// (migration 008): idemadmin.Reconcile lists a natural key completed
	// under more than one key. nil for none. A record completed by the
	// background completer keeps none.
	NaturalKey []byte
	// RequestID is the request's id (Options.Contract.Headers.RequestID), stored
	// with its response when Options.Contract.Headers.OriginalRequest is set, so
	// that a replay names the request whose execution made it.
	RequestID string
}

// Response is an HTTP response as stored and replayed (idemtype.Response,
// named here too because phases return it).
type Response = idemtype.Response

// Outcome is the result of Run.
type Outcome struct {
	Response *Response
	Replayed bool // the response is a stored one, from an earlier execution
	Resumed  bool // this execution continued from an earlier one's recovery point
	// FailedPhase names the phase whose failure Response stores (the
	// ambiguous-store policy); "" when the execution succeeded.
	FailedPhase string
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
	// Render, beside Final, renders the answer again for a replay of an
	// operation that stores a compact one (Policy.Render), from the
	// stored reference, in a read-only transaction: the resource as it is
	// now. Its status and replay headers are replaced by the stored ones.
	Render func(ctx context.Context, tx pgx.Tx, ref Reference) (*Response, error)
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
		case p.Render != nil && p.Final == nil:
			return fmt.Errorf("idem: phase %q: Render is set only beside Final", p.Name)
		}
		seen[p.Name] = true
	}
	return nil
}

// Run executes op for req: it claims the key, or replays the stored response,
// or resumes an abandoned execution from its recovery point, and runs the
// phases that remain. Protocol refusals are returned as *Error (409, 422,
// ...); a releaseError from a phase is returned as is after the claim was
// deleted.
//
// The phases run detached from ctx's cancellation: a client that goes away
// does not interrupt an execution midway; its retry finds the stored response.
func Run[S any](ctx context.Context, e *Engine, op *Operation, req KeyedRequest, phases []Phase[S]) (out *Outcome, err error) {
	if err := checkPhases(phases); err != nil {
		return nil, err
	}
	p, err := e.policy(op)
	if err != nil {
		return nil, err
	}
	if err := idemtype.CheckScope(req.Scope); err != nil {
		return nil, err
	}
	if p.Claim == ClaimAuto && e.opts.Claim != ClaimLast {
		// An engine-wide ClaimLast is what auto does already.
		p.Claim = e.opts.Claim
	}
	mode, err := claimModeOf(p.Claim, phases)
	if err != nil {
		return nil, fmt.Errorf("idem: operation %s: %w", op.ID, err)
	}
	out, err = e.run(ctx, op, p, mode, req, func(c *claim) (*Outcome, error) {
		return execute(c.ctx, e, c, phases)
	})
	if err == nil && out.Replayed && rendered(out.Response) {
		resp, err := e.renderReplay(ctx, op, out.Response, phases[len(phases)-1].Render)
		if err != nil {
			return nil, err
		}
		out = &Outcome{Response: resp, Replayed: true}
	}
	return out, err
}

// run claims req's key in mode, or answers from its record, and has exec
// run the execution of a claim; again when the claim, decided again, must
// be (a lost race, a stale statement).
func (e *Engine) run(ctx context.Context, op *Operation, p Policy, mode claimer, req KeyedRequest, exec func(*claim) (*Outcome, error)) (out *Outcome, err error) {
	ctx, end := e.start(ctx, Step{Kind: StepRequest, Operation: op.ID})
	defer func() { end(err) }()
	if req.IntentAgeSent {
		e.observe(ctx, Event{Kind: EventIntentAge, Operation: op.ID, Age: req.IntentAge, Retention: p.Retention})
	}
	if why := idemtype.WeakKey(req.Key, time.Now()); why != "" {
		e.observe(ctx, Event{Kind: EventWeakKey, Operation: op.ID, Cause: why})
	}
	again := false // the last execution lost its key to a record
	for attempt := 0; ; attempt++ {
		claimCtx, endClaim := e.start(ctx, Step{Kind: StepClaim, Operation: op.ID})
		c, out, err := e.acquire(claimCtx, op, p, mode, req, again)
		endClaim(err)
		if err != nil || out != nil {
			return out, err
		}
		c.ctx = context.WithoutCancel(ctx)
		out, err = exec(c)
		// The record is completed, released, yielded or left: whatever
		// waits on it here looks now.
		e.waits.kick(c.id)
		if !errors.Is(err, errLostRace) && !errors.Is(err, errStale) {
			return out, err
		}
		again = errors.Is(err, errLostRace)
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

// Execution is the idempotent request an execution serves. Phases read it
// from their context with ExecutionFrom, on the request path and in the background
// completer alike: identity that a phase needs (the tenant a row belongs to)
// comes from here, not from values a middleware put in the request's
// context, which the completer does not have.
type Execution struct {
	Operation string // the operationId
	Namespace string // the key namespace (the group, or the operationId)
	// Scope is the resolved scope value: the principal, a header's value,
	// or "" for global. In the background completer it is what the record
	// keeps: the scope's digest (idemadmin.ScopeDigest), or the scope itself for a
	// public one (KeyedRequest.ScopePublic, a webhook's sender).
	Scope string
	Key   string // the client's idempotency key
	// Placement is where the record is placed (KeyedRequest.Placement,
	// as the records table's column holds it; the background completer's
	// too), so that a phase writes the tenant's rows beside it; "" where
	// the records table is not laid out by placement.
	Placement string
	Resumed   bool // the execution continues from an earlier one's recovery point
	// Background is set when the completer runs the execution, with no
	// client waiting for it.
	Background bool
}

type executionKey struct{}

// ExecutionFrom returns the execution a phase runs in, or nil outside one.
func ExecutionFrom(ctx context.Context) *Execution {
	c, _ := ctx.Value(executionKey{}).(*Execution)
	return c
}
