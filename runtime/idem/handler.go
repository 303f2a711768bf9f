package idem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/internal/stephook"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Handler is an operation run as one function, the way an existing
// handler is written, rather than as a list of phases: RunHandler runs it
// for a new key, and it reaches the database through the execution's
// transactions (Tx, Begin, Local) and other systems through Foreign.
//
// Without steps, the handler is one local phase: what it writes through
// Tx or Begin commits with its response, or not at all. With steps, each
// Local commits on its own and each Foreign records its result; an
// execution that dies is resumed by running the handler again from the
// top, where every step already recorded returns its recorded result
// without running. A handler with steps must therefore take the same steps
// in the same order on every run of one request (what it decides from the
// request and from the steps' results, never from the clock or a live
// read outside a step); a resumed run that takes another step than the
// record's fails with an error an operator resolves.
type Handler func(ctx context.Context) (*Response, error)

// ruleError is a rule of the handler mode that the handler's code broke
// (a step inside a step, after the final transaction, a repeated name):
// its words are for the service's developers, in the log, not for its
// clients.
type ruleError struct{ err error }

func (e *ruleError) Error() string { return e.err.Error() }
func (e *ruleError) Unwrap() error { return e.err }

func ruleErrorf(format string, args ...any) error {
	return &ruleError{fmt.Errorf(format, args...)}
}

// errExecutionEnded is what a step or Tx gets once the handler's execution
// is over (a goroutine it left running).
var errExecutionEnded = errors.New("idem: the handler's execution has ended: no more steps or transactions")

// ErrNoExecution is what Tx answers outside a handler's execution.
var ErrNoExecution = errors.New("idem: no idempotent execution in this context (Tx is for handlers that RunHandler runs)")

// RunHandler is Run for an operation served by one function instead of
// phases. The claim mode decides where the handler's final transaction
// is: with ClaimLast and ClaimFirst it is the claim's own, so that a
// handler without steps costs one transaction as a one-phase operation
// does. An operation whose policy says ClaimLast refuses steps (there is
// no record to resume until the end), so ClaimAuto is ClaimFirst here
// (also under an engine-wide ClaimLast). A handler cannot be completed in
// the background (CompleteBackground): the completer has no request to
// call it with.
func RunHandler(ctx context.Context, e *Engine, op *Operation, req KeyedRequest, h Handler) (*Outcome, error) {
	if h == nil {
		return nil, errors.New("idem: RunHandler needs a handler")
	}
	p, err := e.policy(op)
	if err != nil {
		return nil, err
	}
	if err := idemtype.CheckScope(req.Scope); err != nil {
		return nil, err
	}
	if len(p.Render) > 0 {
		return nil, fmt.Errorf("idem: operation %s: %w", op.ID, errNoRender)
	}
	if p.Complete == idemtype.CompleteBackground {
		return nil, fmt.Errorf("idem: operation %s: a handler cannot be completed in the background; use phases", op.ID)
	}
	if p.Claim == ClaimAuto && e.opts.Claim != ClaimLast {
		// An engine-wide ClaimLast is auto, as for phases: a handler may
		// take steps, which need a record.
		p.Claim = e.opts.Claim
	}
	var mode claimer = firstClaim{}
	switch p.Claim {
	case ClaimLast:
		mode = lastClaim{}
	case ClaimSeparate:
		mode = separateClaim{}
	}
	return e.run(ctx, op, p, mode, req, func(c *claim) (*Outcome, error) {
		return e.executeHandler(c, h)
	})
}

// handlerState is what a handler's record keeps between its runs: the
// results of the steps taken, in order.
type handlerState struct {
	Steps []stepRecord `json:"steps"`
}

type stepRecord struct {
	Name    string          `json:"name"`
	Foreign bool            `json:"foreign,omitempty"`
	Value   json.RawMessage `json:"value"`
	// FailedBefore names the steps whose functions failed at this index
	// before this step was taken there: a resumed run may take them again
	// here (the primary card before the backup), and no other.
	FailedBefore []string `json:"failed_before,omitempty"`
}

// finalStep is the recovery point's and the logs' name of a handler's
// final transaction.
const finalStep = "handler"

// runner is one execution of a handler: what its steps need.
type runner struct {
	e     *Engine
	c     *claim
	ctx   context.Context // the execution's, cancelled when the lease is lost: the engine's own statements
	hooks *stephook.Hooks

	mu    sync.Mutex
	state handlerState
	next  int // index of the next step the handler takes
	names map[string]bool
	// failedHere are the steps whose functions failed at index next, for
	// the record of the step that takes it (stepRecord.FailedBefore).
	failedHere []string
	// committed: a step of this record committed; foreignTried: a foreign
	// call may have had an effect.
	committed, foreignTried bool
	final                   *session // the final transaction when the claim's is not it
	finalBegun              bool
	busy                    string // the step running now, ""
	busyForeign             bool   // the step running now is foreign
	ended                   bool   // the execution is over: no more steps, no Tx
	// claimLost: the claim's transaction, committed alone before the
	// first step, failed: no record was committed.
	claimLost bool
	// err is a failure of the engine's own (a step's commit, a resumed run
	// that takes other steps): it decides the outcome, whatever the
	// handler makes of it.
	err error
	// unresumable is why the record cannot be resumed by this handler (it
	// takes other steps than the record's); set with err.
	unresumable error
	// bound cancels the handler's context when the claim's transaction,
	// still open, outlives the lease; keep links it to the lease keeper.
	bound  *time.Timer
	cancel context.CancelCauseFunc
}

type runnerKey struct{}

type stepTxKey struct{}

func runnerFrom(ctx context.Context) *runner {
	r, _ := ctx.Value(runnerKey{}).(*runner)
	return r
}

func (e *Engine) executeHandler(c *claim, h Handler) (*Outcome, error) {
	defer c.sess.end()
	ctx := c.ctx
	r := &runner{e: e, c: c, ctx: ctx, hooks: stephook.From(ctx), names: map[string]bool{}}
	if err := c.unknownDerivation(); err != nil {
		return e.cannotResume(c, err)
	}
	if len(c.state) > 0 {
		if err := json.Unmarshal(c.state, &r.state); err != nil {
			return e.cannotResume(c, fmt.Errorf("decoding the recorded steps: %w", err))
		}
	}
	if c.recovery != "" && !r.recorded(c.recovery) {
		return e.cannotResume(c, fmt.Errorf("recovery point %q is not a step this handler recorded", c.recovery))
	}
	if c.resumed {
		e.observe(ctx, Event{Kind: EventResume, Operation: c.op.ID})
	}
	c.call = Execution{Operation: c.op.ID, Namespace: c.ns, Scope: c.scope, Key: c.key, Placement: c.placement, Resumed: c.resumed, Background: c.background}
	ctx = context.WithValue(ctx, executionKey{}, &c.call)
	r.committed = c.recovery != ""

	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.cancel = cancel
	if c.sess != nil {
		// No record is committed (first mode), or none exists (last
		// mode): nothing bounds this transaction but itself.
		r.bound = time.AfterFunc(c.policy.Lease, func() { cancel(context.DeadlineExceeded) })
		defer r.bound.Stop()
	} else {
		r.keep(hctx)
	}
	defer func() {
		// A final transaction still open (the execution died in it) rolls
		// back, as a dead connection's would.
		r.final.end()
		if c.keeper != nil {
			c.keeper.close()
		}
	}()
	r.ctx = hctx
	hctx = context.WithValue(hctx, runnerKey{}, r)

	c.phase = finalStep
	began := time.Now()
	pctx, endPhase := e.start(hctx, Step{Kind: StepPhase, Operation: c.op.ID, Phase: finalStep, Background: c.background})
	var resp *Response
	err := recovered(finalStep, func() (err error) {
		resp, err = h(pctx)
		return err
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = true // whatever the handler left running gets no transaction
	switch {
	case r.unresumable != nil:
	case r.err != nil:
		err, resp = r.err, nil
	case r.busy != "":
		err, resp = ruleErrorf("idem: the handler returned while its step %q still ran", r.busy), nil
	case err == nil && r.next < len(r.state.Steps):
		r.stop(fmt.Errorf("this run answered after %d step(s), the record has %d (%q next): %s", r.next, len(r.state.Steps), r.state.Steps[r.next].Name, sameStepsRule))
	}
	if r.unresumable != nil {
		// The record's steps are not this handler's: keep it for an
		// operator, as a recovery point no phase has.
		c.keeper.stop()
		r.final.end()
		e.observe(pctx, Event{Kind: EventPhase, Operation: c.op.ID, Phase: c.phase, Duration: time.Since(began), Err: r.unresumable})
		endPhase(r.unresumable)
		out, answer := e.cannotResume(c, r.unresumable)
		return out, e.report(c, r.unresumable, out, answer)
	}
	if err == nil {
		err = checkFinal(finalStep, resp)
	}
	if err == nil {
		c.phase = finalStep
		if !r.finalBegun {
			r.hooks.OnStart(len(r.state.Steps), finalStep, "")
		}
		r.hooks.OnEnd(len(r.state.Steps), finalStep)
		resp, err = r.commitFinal(hctx, resp)
	}
	if err != nil && errors.Is(context.Cause(hctx), ErrFenced) {
		err = ErrFenced // whatever the handler or the commit saw, the cause is the lost lease
	}
	var rule *ruleError
	if errors.As(err, &rule) {
		// A rule of the handler mode the code broke: the client gets the
		// API's own failure, the words go to the log (report).
		err = &Error{Kind: idemtype.KindFailed, Err: err,
			Detail: "the service could not handle this request; its log says why"}
	}
	e.observe(pctx, Event{Kind: EventPhase, Operation: c.op.ID, Phase: c.phase, Duration: time.Since(began), Err: err})
	endPhase(err)
	if err != nil {
		e.logPanic(pctx, c, c.phase, err)
		r.final.end()
		if c.sess != nil || r.claimLost {
			c.sess.end()
			c.sess = nil
			return e.inlineFailed(ctx, c, err)
		}
		return e.failed(c, r.committed, r.foreignTried, err)
	}
	e.completed(ctx, c)
	return &Outcome{Response: resp, Resumed: c.resumed}, nil
}

// stop marks the record as one this handler cannot resume (why), for
// executeHandler to keep for an operator, and returns the error the
// handler's call gets. r.mu is held.
func (r *runner) stop(why error) error {
	r.unresumable = why
	r.err = &Error{Kind: idemtype.KindFailed, Detail: unresumable, Err: why}
	return r.err
}

// sameStepsRule ends what a resumed run that differs from its record is
// told.
const sameStepsRule = "a handler must take the same steps in the same order on every run of a request"

// recorded reports whether the record's steps include one named name.
func (r *runner) recorded(name string) bool {
	for _, s := range r.state.Steps {
		if s.Name == name {
			return true
		}
	}
	return false
}

// keep renews the lease while the handler runs, and cancels the handler's
// context when it is lost.
func (r *runner) keep(hctx context.Context) {
	kctx, k := r.e.keepLease(hctx, r.c)
	r.c.keeper = k
	context.AfterFunc(kctx, func() { r.cancel(context.Cause(kctx)) })
}

// commitFinal stores resp in the final transaction (the claim's, or the
// one Tx began, or one begun now) and commits.
func (r *runner) commitFinal(ctx context.Context, resp *Response) (*Response, error) {
	c, e := r.c, r.e
	if c.sess != nil {
		stored, first, omitted, err := e.forStore(ctx, c, finalStep, resp)
		if err != nil {
			return nil, err
		}
		since := time.Now()
		if err := c.mode.(inlineClaimer).commit(ctx, e, c, finalStep, nil, stored, omitted); err != nil {
			return nil, err
		}
		c.sess.end()
		c.sess = nil
		e.remember(c, stored, omitted, since)
		return first, nil
	}
	if r.final == nil {
		sess, err := e.begin(ctx)
		if err != nil {
			return nil, err
		}
		r.final = sess
	}
	defer r.final.end()
	// No refresh may land after the completion: it would find the record
	// completed and report a spurious fence.
	return e.finishPhase(ctx, r.final.tx.conn, c, finalStep, nil, resp)
}

// step begins the handler's step i named name: it checks that the
// handler may take it, and returns the record's result when the step is
// recorded already; recorded is nil when the step is to run.
//
// A step whose function fails records nothing but its name, with the
// step that next takes its index (stepRecord.FailedBefore), and gives the
// index back (failedStep), so that the next step the handler takes is at
// that index, on this run and on every resumed one. A resumed run may
// therefore take, where the record holds another step, one of those that
// failed there: if it fails again, the run goes on as the earlier one did;
// if it succeeds where the earlier run failed, the run and the record went
// different ways (matchesRecord). Any other step there is refused before
// it runs.
func (r *runner) step(name string, foreign bool) (i int, recorded *stepRecord, err error) {
	if r.err != nil {
		return 0, nil, r.err
	}
	if r.ended {
		return 0, nil, errExecutionEnded
	}
	i = r.next
	r.next++
	switch {
	case r.busy != "":
		r.err = ruleErrorf("idem: step %q taken inside step %q: steps do not nest, and are taken one at a time", name, r.busy)
	case name == "" || r.names[name]:
		r.err = ruleErrorf("idem: step %d: name %q is empty or repeated; every step of a handler needs a name of its own", i, name)
	case r.finalBegun:
		r.err = ruleErrorf("idem: step %q taken after the handler began its final transaction (Tx, Begin): steps come before it", name)
	case i < len(r.state.Steps) && r.state.Steps[i].Name == name && r.state.Steps[i].Foreign == foreign:
		r.names[name] = true
		r.failedHere = nil
		return i, &r.state.Steps[i], nil
	case i < len(r.state.Steps) && (r.recorded(name) || !slices.Contains(r.state.Steps[i].FailedBefore, name)):
		// Recorded elsewhere, or not a step that failed here before the
		// record's: another path, refused before it runs.
		rec := r.state.Steps[i]
		r.stop(fmt.Errorf("step %d is %q (foreign %t) in this run, %q (foreign %t) in the record: %s", i, name, foreign, rec.Name, rec.Foreign, sameStepsRule))
	case r.c.policy.Claim == ClaimLast:
		r.err = ruleErrorf("idem: step %q: operation %s claims its keys last (claim: last), which runs a handler in one transaction and has no record to resume steps from; use claim: first or separate", name, r.c.op.ID)
	}
	if r.err != nil {
		return 0, nil, r.err
	}
	r.names[name] = true
	r.c.phase = name
	r.busy, r.busyForeign = name, foreign
	if r.c.sess != nil {
		// The claim's transaction is still open: it commits alone, before
		// the step, as before a foreign phase.
		err := r.c.mode.(inlineClaimer).commit(r.ctx, r.e, r.c, "", nil, nil, false)
		r.c.sess.end()
		r.c.sess = nil
		r.bound.Stop()
		if err != nil {
			r.err, r.busy, r.busyForeign, r.claimLost = err, "", false, true
			return 0, nil, err
		}
		// The lease was counted from the claim's start, and the handler
		// may have run most of it before this step: renew it now, not a
		// third of a lease from now.
		ok, err := r.e.store.refresh(r.ctx, r.c)
		switch {
		case err != nil:
			r.err, r.busy, r.busyForeign = err, "", false
			return 0, nil, err
		case !ok:
			r.err, r.busy, r.busyForeign = ErrFenced, "", false
			return 0, nil, ErrFenced
		}
		r.keep(r.ctx)
	}
	return i, nil, nil
}

// Local runs fn as a step of the handler that RunHandler runs: in a
// transaction of its own, whose commit also records fn's result (as JSON)
// as the step named name. On a resumed run the recorded result is returned
// without running fn. fn's error is returned as it is, its transaction
// rolled back and nothing recorded: the handler decides what it means (an
// answer such as a 404, or its error).
//
// Outside an execution (the handler called as a plain one), Local runs fn
// in a transaction that db begins, and commits it: the handler behaves as
// it did before it was made idempotent.
func Local[T any](ctx context.Context, db Beginner, name string, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var zero T
	r := runnerFrom(ctx)
	if r == nil {
		return plainStep(ctx, db, fn)
	}
	r.mu.Lock()
	i, rec, err := r.step(name, false)
	r.mu.Unlock()
	switch {
	case err != nil:
		return zero, err
	case rec != nil:
		return decodeStep[T](r, rec)
	}
	r.hooks.OnStart(i, name, "")
	var v T
	var fnErr error
	_, err = r.e.commitPhase(r.ctx, r.c, name, &r.state, func(tx pgx.Tx) (*Response, error) {
		v, fnErr = fn(context.WithValue(ctx, stepTxKey{}, tx), tx)
		r.hooks.OnDone(i, name)
		if fnErr != nil {
			return nil, fnErr
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("idem: step %q: encoding its result: %w", name, err)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if err := r.matchesRecord(i, name); err != nil {
			return nil, err // rolls back what fn wrote
		}
		r.state.Steps = append(r.state.Steps, stepRecord{Name: name, Value: b, FailedBefore: r.failedHere})
		r.failedHere = nil
		r.hooks.OnEnd(i, name)
		return nil, nil
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.busy, r.busyForeign = "", false
	switch {
	case fnErr != nil:
		r.failedStep(i, name)
		return zero, fnErr
	case err != nil:
		r.err = err
		return zero, err
	}
	r.committed = true
	r.c.recovery = name
	return v, nil
}

// Foreign runs fn as a step of the handler that RunHandler runs that calls
// another system: outside any transaction, with a key derived from the
// request's key and name, the same on every run of the request, to send as
// the other system's idempotency key. Its result (as JSON) is recorded
// before Foreign returns, so that a resumed run gets it without a second
// call; a run that dies before that calls fn again, with the same key.
//
// Outside an execution, fn gets a new random key: each call is an intent
// of its own, as before the handler was made idempotent.
func Foreign[T any](ctx context.Context, name string, fn func(ctx context.Context, key string) (T, error)) (T, error) {
	var zero T
	r := runnerFrom(ctx)
	if r == nil {
		return fn(ctx, randomKey())
	}
	r.mu.Lock()
	i, rec, err := r.step(name, true)
	r.mu.Unlock()
	switch {
	case err != nil:
		return zero, err
	case rec != nil:
		return decodeStep[T](r, rec)
	}
	c := r.c
	key := deriveKey(c.derivation, c.ns, c.derivationScope(), c.key, name, c.fingerprint, c.keyLength)
	r.hooks.OnStart(i, name, key)
	r.mu.Lock()
	r.foreignTried = true
	r.mu.Unlock()
	v, err := fn(ctx, key)
	r.hooks.OnDone(i, name)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.busy, r.busyForeign = "", false
	if err != nil {
		r.failedStep(i, name)
		return zero, err
	}
	if err := r.matchesRecord(i, name); err != nil {
		return zero, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		r.err = ruleErrorf("idem: step %q: encoding its result: %w", name, err)
		return zero, r.err
	}
	r.hooks.OnEnd(i, name)
	r.state.Steps = append(r.state.Steps, stepRecord{Name: name, Foreign: true, Value: b, FailedBefore: r.failedHere})
	r.failedHere = nil
	if _, err := r.e.commitPhase(r.ctx, c, name, &r.state, func(pgx.Tx) (*Response, error) { return nil, nil }); err != nil {
		r.err = err
		return zero, err
	}
	r.committed = true
	c.recovery = name
	return v, nil
}

// failedStep gives a failed step's index back: it records nothing, and
// the handler may take it again under the same name (a retry inside the
// run). r.mu is held.
func (r *runner) failedStep(i int, name string) {
	r.next = i
	delete(r.names, name)
	if !slices.Contains(r.failedHere, name) {
		r.failedHere = append(r.failedHere, name)
	}
}

// matchesRecord checks, before a step that ran is recorded at i, that the
// record holds no other step there: one that failed on an earlier run and
// succeeds on this one, where the earlier run went on to other steps. The
// run and the record then went different ways, and the record is kept for
// an operator. r.mu is held.
func (r *runner) matchesRecord(i int, name string) error {
	if i >= len(r.state.Steps) {
		return nil
	}
	return r.stop(fmt.Errorf("step %q failed on an earlier run, which took %q next; it succeeded on this one: %s", name, r.state.Steps[i].Name, sameStepsRule))
}

func decodeStep[T any](r *runner, rec *stepRecord) (T, error) {
	var v T
	if err := json.Unmarshal(rec.Value, &v); err != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		return v, r.stop(fmt.Errorf("decoding the recorded result of step %q: %w", rec.Name, err))
	}
	return v, nil
}

// Beginner begins a transaction: a *pgxpool.Pool, a *pgx.Conn, a pgx.Tx.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Tx returns the transaction a handler's database work goes through: in
// a step's function, the step's; elsewhere in a handler that RunHandler
// runs, its final transaction, which also stores the response and commits
// with it (begun at the first call; after it, the handler takes no more
// steps). The engine ends it: its Commit and Rollback return an error.
// Outside an execution, Tx returns ErrNoExecution.
func Tx(ctx context.Context) (pgx.Tx, error) {
	if tx, ok := ctx.Value(stepTxKey{}).(pgx.Tx); ok {
		return tx, nil
	}
	r := runnerFrom(ctx)
	if r == nil {
		if p, ok := ctx.Value(plainFinalKey{}).(*plainFinal); ok {
			return p.begin(ctx)
		}
		return nil, ErrNoExecution
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.err != nil:
		return nil, r.err
	case r.ended:
		return nil, errExecutionEnded
	case r.busyForeign:
		return nil, fmt.Errorf("idem: Tx inside foreign step %q: a foreign step runs outside any transaction; write what it returns after it", r.busy)
	case r.busy != "":
		return nil, ruleErrorf("idem: Tx inside local step %q, through the handler's context: the step's function works through its own tx (or the context it is given), and the final transaction comes after the steps", r.busy)
	case !r.finalBegun && r.next < len(r.state.Steps):
		return nil, r.stop(fmt.Errorf("this run began its final transaction after %d step(s), the record has %d (%q next): %s", r.next, len(r.state.Steps), r.state.Steps[r.next].Name, sameStepsRule))
	}
	if !r.finalBegun {
		r.hooks.OnStart(len(r.state.Steps), finalStep, "")
	}
	r.finalBegun = true
	if r.c.sess != nil {
		return &r.c.sess.tx, nil
	}
	if r.final == nil {
		sess, err := r.e.begin(r.ctx)
		if err != nil {
			r.err = err
			return nil, r.err
		}
		r.final = sess
	}
	return &r.final.tx, nil
}

// Querier is what sqlc's generated code runs its queries on (its DBTX),
// and what a *pgxpool.Pool, a *pgx.Conn and a pgx.Tx have.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DB is what a handler's queries go through, in one expression: in a
// handler that RunHandler runs, its transaction (Tx: a step's, or the
// final one, which commits with the response); outside an execution, db.
// A handler that ran its queries on the pool changes s.pool to
// idem.DB(ctx, s.pool) (sqlc: db.New(idem.DB(ctx, s.pool))). When the
// transaction cannot be had (its connection fails), every query of the
// Querier returned fails with that error: it never falls back to db.
func DB(ctx context.Context, db Querier) Querier {
	tx, err := Tx(ctx)
	switch {
	case errors.Is(err, ErrNoExecution):
		return db
	case err != nil:
		return failedQuerier{err}
	}
	return tx
}

// Read is what a handler's reads before its steps go through (validating
// the request, a lookup in another module), in one expression: they need
// no transaction of the execution, and DB would begin its final one,
// after which the handler takes no step. In a step's function, Read is
// the step's transaction; once the final transaction began, that one (it
// sees what the handler wrote); otherwise, and outside an execution, db
// itself, so that a read holds a pooled connection for its statement only
// (Options.PoolHeadroom keeps one free for it). What goes through Read
// must only read: a write on db would commit outside the execution.
func Read(ctx context.Context, db Querier) Querier {
	if tx, ok := ctx.Value(stepTxKey{}).(pgx.Tx); ok {
		return tx
	}
	r := runnerFrom(ctx)
	if r == nil {
		if p, ok := ctx.Value(plainFinalKey{}).(*plainFinal); ok && p.sess != nil {
			return &p.sess.tx // a keyless run's final transaction, begun
		}
		return db
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !r.finalBegun || r.ended:
		return db
	case r.c.sess != nil:
		return &r.c.sess.tx
	case r.final != nil:
		return &r.final.tx
	}
	return db
}

// BeginTx is Begin with options, for a repository's BeginTx(ctx, opts):
// outside an execution, db.BeginTx(ctx, opts). In an execution a
// transaction is a savepoint in the execution's own, which takes no
// options: the zero TxOptions is Begin's savepoint, and any other is
// refused, saying so, rather than silently ignored.
func BeginTx(ctx context.Context, db interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}, opts pgx.TxOptions) (pgx.Tx, error) {
	if runnerFrom(ctx) == nil && ctx.Value(stepTxKey{}) == nil && ctx.Value(plainFinalKey{}) == nil {
		return db.BeginTx(ctx, opts)
	}
	if opts != (pgx.TxOptions{}) {
		return nil, fmt.Errorf("idem: BeginTx with options %+v in an idempotent execution: its transactions are savepoints of the execution's own, which take no isolation level or access mode; set them on the operation's transaction instead, or begin with the zero TxOptions", opts)
	}
	tx, err := Tx(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Begin(ctx)
}

// failedQuerier is DB's answer when the execution's transaction cannot be
// had: each query fails with why.
type failedQuerier struct{ err error }

func (q failedQuerier) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, q.err
}
func (q failedQuerier) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, q.err }
func (q failedQuerier) QueryRow(context.Context, string, ...any) pgx.Row        { return errRow{q.err} }

// Begin is db.Begin for a handler's code: in an execution, a transaction
// nested in Tx's (a savepoint: its Commit releases it, its Rollback rolls
// back to it, and what it keeps commits with the response); outside one,
// db.Begin(ctx). A handler that begins its transactions with Begin runs
// the same code with and without idemgen.
func Begin(ctx context.Context, db Beginner) (pgx.Tx, error) {
	if runnerFrom(ctx) == nil && ctx.Value(stepTxKey{}) == nil && ctx.Value(plainFinalKey{}) == nil {
		return db.Begin(ctx)
	}
	tx, err := Tx(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Begin(ctx)
}

// RunHandlerWithoutKey runs h for a request without a key, where the
// operation's key is optional: unprotected, as a plain handler. Its final
// transaction (Tx) is begun on the engine's pool when it asks for it and
// committed when it returns a response; its steps run as outside an
// execution (Local in a transaction of its own, Foreign with a new key).
func RunHandlerWithoutKey(ctx context.Context, e *Engine, h Handler) (resp *Response, err error) {
	p := &plainFinal{e: e}
	defer func() { p.sess.end() }() // begun, if at all, by the handler
	resp, err = h(context.WithValue(ctx, plainFinalKey{}, p))
	if err != nil {
		return nil, err
	}
	if p.sess != nil {
		if err := p.sess.tx.tx.Commit(ctx); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// plainFinal is the final transaction of a handler run without a key:
// the engine's, as in an execution (its Commit and Rollback refused).
type plainFinal struct {
	e    *Engine
	sess *session
}

func (p *plainFinal) begin(ctx context.Context) (pgx.Tx, error) {
	if p.sess == nil {
		sess, err := p.e.beginKeyless(ctx)
		if err != nil {
			return nil, err
		}
		p.sess = sess
	}
	return &p.sess.tx, nil
}

type plainFinalKey struct{}

func plainStep[T any](ctx context.Context, db Beginner, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var zero T
	tx, err := db.Begin(ctx)
	if err != nil {
		return zero, err
	}
	defer tx.Rollback(ctx)
	v, err := fn(context.WithValue(ctx, stepTxKey{}, tx), tx)
	if err != nil {
		return zero, err
	}
	if err := tx.Commit(ctx); err != nil {
		return zero, err
	}
	return v, nil
}

func randomKey() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
