package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// execute runs the phases after c's recovery point.
func execute[S any](ctx context.Context, e *Engine, c *claim, phases []Phase[S]) (*Outcome, error) {
	// An inline claim's transaction that never committed (an error, a panic,
	// an execution that died in runtime.Goexit) is rolled back.
	defer c.sess.end()
	var state S
	start := 0
	if err := c.unknownDerivation(); err != nil {
		return e.cannotResume(c, err)
	}
	if c.recovery != "" {
		i := phaseIndex(phases, c.recovery)
		if i < 0 {
			// The operation's phases changed under a live record: keep it for
			// an operator rather than guess.
			return e.cannotResume(c, fmt.Errorf("recovery point %q is not a phase of %s", c.recovery, c.op.ID))
		}
		start = i + 1
	}
	if len(c.state) > 0 {
		if err := json.Unmarshal(c.state, &state); err != nil {
			return e.cannotResume(c, fmt.Errorf("decoding stored phase state: %w", err))
		}
	}
	if c.resumed {
		e.observe(ctx, Event{Kind: EventResume, Operation: c.op.ID})
	}

	c.call = Execution{Operation: c.op.ID, Namespace: c.ns, Scope: c.scope, Key: c.key, Placement: c.placement, Resumed: c.resumed, Background: c.background}
	ctx = context.WithValue(ctx, executionKey{}, &c.call)

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
		resp, err := runInClaimTx(ctx, e, c, phases[i:j], &state)
		c.sess.end()
		c.sess = nil
		switch {
		case err != nil:
			return e.inlineFailed(ctx, c, err)
		case resp != nil:
			e.completed(ctx, c)
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
		c.phase = p.Name
		began := time.Now()
		var resp *Response
		pctx, endPhase := e.start(ctx, Step{Kind: StepPhase, Operation: c.op.ID, Phase: p.Name, Background: c.background})
		err := recovered(p.Name, func() error {
			var err error
			switch {
			case p.foreign():
				foreignTried = true
				key := deriveKey(c.derivation, c.ns, c.derivationScope(), c.key, p.Name, c.fingerprint, c.keyLength)
				err = p.Foreign(pctx, key, &state)
				if a := Answered(err); a != nil {
					// The phase answers: stored on its own, as a final
					// phase's response would be.
					resp, err = e.commitPhase(pctx, c, p.Name, &state, func(pgx.Tx) (*Response, error) {
						return a, checkFinal(p.Name, a)
					})
				}
			default:
				resp, err = e.commitPhase(pctx, c, p.Name, &state, func(tx pgx.Tx) (*Response, error) {
					if p.Final == nil {
						err := p.Local(pctx, tx, &state)
						if a := Answered(err); a != nil {
							return a, checkFinal(p.Name, a)
						}
						return nil, err
					}
					resp, err := p.Final(pctx, tx, &state)
					if a := Answered(err); a != nil {
						resp, err = a, nil
					}
					if err == nil {
						err = checkFinal(p.Name, resp)
					}
					return resp, err
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
			return e.failed(c, committed, foreignTried, err)
		}
		if resp != nil {
			e.completed(ctx, c)
			return &Outcome{Response: resp, Resumed: c.resumed}, nil
		}
		if !p.foreign() {
			committed = true
			c.recovery = p.Name
		}
	}
	return nil, errors.New("idem: the last phase returned no response")
}

// inlineFailed is the outcome of an execution whose claim's transaction
// (c.sess, now ended) failed: in its phases, or at its commit.
func (e *Engine) inlineFailed(ctx context.Context, c *claim, err error) (*Outcome, error) {
	var unknown *commitUnknownError
	if !errors.As(err, &unknown) {
		err = c.mode.(inlineClaimer).phaseFailed(e, c, err)
	}
	switch {
	case errors.As(err, &unknown):
		// Either all of it committed or nothing did.
		return e.failed(c, false, false, err)
	case errors.Is(err, errLostRace), errors.Is(err, errStale):
		return nil, err
	}
	// Rolled back, or refused by the server: no record and no effect
	// remain.
	e.observe(ctx, Event{Kind: EventRelease, Operation: c.op.ID})
	e.hooks.run(e.hooks.afterEnd)
	return nil, e.report(c, err, nil, err)
}

// runInClaimTx runs local phases in the transaction the claim left open
// (c.sess: ClaimFirst, ClaimLast), bounded by the lease, then has the claim
// mode store their progress (or the final response) and commit, in one
// round trip. With no phases (the first is foreign), the claim commits
// alone. An error is the phases', or the commit's as the store classifies
// it: a *commitUnknownError when the COMMIT may have taken effect;
// otherwise nothing committed.
func runInClaimTx[S any](ctx context.Context, e *Engine, c *claim, phases []Phase[S], state *S) (resp *Response, err error) {
	// No record is committed (first mode), or none exists (last mode):
	// nothing bounds this transaction but itself.
	ctx, cancel := context.WithTimeout(ctx, c.policy.Lease)
	defer cancel()
	mode := c.mode.(inlineClaimer)
	if len(phases) == 0 {
		return nil, mode.commit(ctx, e, c, "", nil, nil, false)
	}
	for _, p := range phases {
		c.phase = p.Name
		began := time.Now()
		pctx, endPhase := e.start(ctx, Step{Kind: StepPhase, Operation: c.op.ID, Phase: p.Name, Background: c.background})
		err := recovered(p.Name, func() error {
			if p.Final == nil {
				err := p.Local(pctx, &c.sess.tx, state)
				if a := Answered(err); a != nil {
					// The phase answers: the later phases do not run.
					resp = a
					return checkFinal(p.Name, a)
				}
				return err
			}
			var err error
			resp, err = p.Final(pctx, &c.sess.tx, state)
			if a := Answered(err); a != nil {
				resp, err = a, nil
			}
			if err == nil {
				err = checkFinal(p.Name, resp)
			}
			return err
		})
		e.observe(pctx, Event{Kind: EventPhase, Operation: c.op.ID, Phase: p.Name, Duration: time.Since(began), Err: err})
		endPhase(err)
		if err != nil {
			e.logPanic(pctx, c, p.Name, err)
			return nil, err
		}
		if resp != nil {
			break
		}
	}
	omitted := false
	var stored *Response
	if resp != nil {
		if stored, resp, omitted, err = e.forStore(ctx, c, c.phase, resp); err != nil {
			return nil, err
		}
	}
	since := time.Now()
	err = mode.commit(ctx, e, c, phases[len(phases)-1].Name, func() ([]byte, error) {
		st, err := json.Marshal(state)
		if err != nil {
			return nil, fmt.Errorf("idem: encoding phase state: %w", err)
		}
		return st, nil
	}, stored, omitted)
	if err != nil {
		return nil, err
	}
	if resp != nil {
		e.remember(c, stored, omitted, since)
	}
	return resp, nil
}

// checkFinal refuses, as the final phase's error, a response that must not
// be stored: none at all (its writes would commit with no answer to give),
// or a status net/http cannot write as a final one (under 100 it panics
// the handler, on the first answer and every replay; a 1xx is no final
// answer). The phase's transaction then rolls back, as for any error of it.
func checkFinal(phase string, resp *Response) error {
	switch {
	case resp == nil:
		return fmt.Errorf("idem: final phase %s returned no response", phase)
	case resp.Status < 200 || resp.Status > 999:
		return fmt.Errorf("idem: final phase %s returned status %d; a final response's status is 200 to 999", phase, resp.Status)
	}
	return nil
}

// completed notes that c's execution completed: its event, and, for one
// that ran from its start, how long it took (for duplicates' Retry-After).
func (e *Engine) completed(ctx context.Context, c *claim) {
	e.observe(ctx, Event{Kind: EventComplete, Operation: c.op.ID})
	if !c.resumed && !c.background {
		e.durations.observe(c.op.ID, time.Since(c.began))
	}
	e.hooks.run(e.hooks.afterEnd)
}

// kindOf is the kind of err's *Error, or "".
func kindOf(err error) idemtype.ErrorKind {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Kind
	}
	return ""
}

func (e *Engine) logPanic(ctx context.Context, c *claim, phase string, err error) {
	var pe *panicError
	if errors.As(err, &pe) {
		e.log.ErrorContext(ctx, "idem: a phase panicked", "operation", c.op.ID, "phase", phase, "panic", pe.Value, "stack", string(pe.Stack))
	}
}

// panicError is a panic in a phase, recovered by the engine and treated as
// the phase's error: the claim is released when nothing was committed, and
// the failure is ambiguous otherwise.
type panicError struct {
	Phase string
	Value any
	Stack []byte
}

func (e *panicError) Error() string {
	return fmt.Sprintf("idem: phase %s panicked: %v", e.Phase, e.Value)
}

// recovered runs f and turns a panic into a *panicError. (runtime.Goexit is
// not a panic and goes through.)
func recovered(phase string, f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{Phase: phase, Value: v, Stack: debug.Stack()}
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
	return e.finishPhase(ctx, sess.tx.conn, c, name, state, resp)
}

// finishPhase stores a local phase's progress (name and state) or, with
// resp, the response, in the transaction open on conn, fenced by the owner
// token, and commits.
func (e *Engine) finishPhase(ctx context.Context, conn *pgx.Conn, c *claim, name string, state any, resp *Response) (*Response, error) {
	st, err := json.Marshal(state)
	if err != nil {
		return nil, fmt.Errorf("idem: encoding phase state after %s: %w", name, err)
	}
	omitted := false
	var stored *Response
	if resp != nil {
		// The answer goes out exactly as it is stored (the allowed headers
		// only), so that it and every replay are byte-identical. A body too
		// large to store still goes out in full this once. An operation
		// that renders its replays stores its reference instead.
		if stored, resp, omitted, err = e.forStore(ctx, c, name, resp); err != nil {
			return nil, err
		}
		// No refresh may land after the completion: it would find the
		// record completed and report a spurious fence.
		c.keeper.stop()
	}
	since := time.Now()
	if err := e.commit(ctx, conn, c, name, st, stored, omitted); err != nil {
		return nil, err
	}
	if resp != nil {
		e.remember(c, stored, omitted, since)
	}
	return resp, nil
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
	e.cache.put(cacheKey{c.ns, c.scope, c.key, c.given}, c.op.ID, c.fingerprint, resp, since.Add(min(c.policy.Retention-skew, e.opts.ReplayCacheTTL)), since)
}

// commit stores c's progress (phase and state) or, with resp, its
// response, and commits the transaction open on conn.
func (e *Engine) commit(ctx context.Context, conn *pgx.Conn, c *claim, phase string, state []byte, resp *Response, omitted bool) error {
	if resp != nil {
		return e.store.commitResponse(ctx, conn, c, resp, omitted)
	}
	return e.store.commitProgress(ctx, conn, c, phase, state)
}

// unknownDerivation says why c cannot be resumed when a newer version of
// the engine claimed it, whose derived keys this one cannot make: a
// foreign call would go out under another key.
func (c *claim) unknownDerivation() error {
	if c.derivation > currentKeyDerivation {
		return fmt.Errorf("record claimed with key derivation %d; this engine knows %d", c.derivation, currentKeyDerivation)
	}
	return nil
}

// cannotResume gives back the lease of a record this engine cannot
// continue (keeping it for an operator) and answers why.
func (e *Engine) cannotResume(c *claim, err error) (*Outcome, error) {
	e.yield(c)
	return nil, &Error{Kind: idemtype.KindFailed, Err: err, Detail: unresumable}
}

// unresumable is the detail of a failure to resume a recorded execution
// this version of the service cannot continue.
const unresumable = "the request's earlier execution cannot be resumed by this version of the service; retrying does not help until an operator resolves it"
