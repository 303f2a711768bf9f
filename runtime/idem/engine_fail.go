package idem

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// failed is fail, reported: the failure's one log line, and the error Run
// returns, a *PhaseError.
func (e *Engine) failed(c *claim, committed, foreignTried bool, err error) (*Outcome, error) {
	out, ferr := e.fail(c, committed, foreignTried, err)
	if errors.Is(ferr, errStale) {
		return out, ferr // decided again by Run: not an outcome yet
	}
	return out, e.report(c, err, out, ferr)
}

// report logs, once, why c's execution failed (cause: the phase's error)
// and what became of it (out and answer: what fail decided), and returns
// answer as a *PhaseError (nil when the failure was stored as the answer).
// A released failure is logged at Info, since it is often the client's (bad
// input); the others at Error.
func (e *Engine) report(c *claim, cause error, out *Outcome, answer error) error {
	if kindOf(answer) == idemtype.KindInFlight && !errors.Is(cause, ErrFenced) {
		// A concurrent duplicate's claim held the record (ClaimLast's lost
		// race): not a failure of this execution, and answered as such.
		return answer
	}
	outcome, level := "released", slog.LevelInfo
	switch kindOf(answer) {
	case idemtype.KindFailed:
		outcome, level = "failed", slog.LevelError
	case idemtype.KindUnavailable:
		outcome, level = "outcome unknown", slog.LevelError
	case idemtype.KindInFlight:
		outcome, level = "fenced", slog.LevelWarn
	}
	if out != nil {
		outcome, level = "failure stored for replay", slog.LevelError
	}
	if c.releaseRefused {
		outcome += " (release refused: a phase had committed)"
	}
	attrs := make([]slog.Attr, 0, 14)
	attrs = append(attrs, slog.String("operation", c.op.ID), slog.String("scope", e.LogScope(c.scope)), slog.String("idempotency_key", c.key),
		slog.String("phase", c.phase), slog.String("recovery_point", c.recovery), slog.Bool("resumed", c.resumed),
		slog.Bool("background", c.background), slog.String("outcome", outcome))
	// The statement, SQLSTATE and message of a store error (a commit's),
	// or of the phase's own statement.
	e.log.LogAttrs(c.ctx, level, "idem: execution failed", storeAttrs(attrs, cause)...)
	if answer == nil {
		return nil
	}
	return &PhaseError{Operation: c.op.ID, Phase: c.phase, RecoveryPoint: c.recovery, Resumed: c.resumed, Err: answer}
}

// fail applies the outcome rules to a failed phase.
func (e *Engine) fail(c *claim, committed, foreignTried bool, err error) (*Outcome, error) {
	ctx := c.ctx
	// Whatever happens next (release, yield, a stored failure), no refresh
	// may land after it.
	c.keeper.stop()
	var rel *releaseError
	var protoErr *Error
	var unknown *commitUnknownError
	// The phase declared the failure effect-free: a release, or a protocol
	// error such as the not-implemented stub. The engine's own (no turn for
	// a connection, a rule of the handler mode broken) declare nothing: a
	// foreign call before them may have had its effect.
	var rule *ruleError
	engineMade := errors.Is(err, errPoolExhausted) || errors.As(err, &rule)
	declared := !engineMade && (errors.As(err, &rel) || errors.As(err, &protoErr))
	switch {
	case errors.As(err, &unknown):
		// The phase's COMMIT may have taken effect: nothing is released or
		// stored as if it had not. The next attempt, or the completer, finds
		// out from the record, at once: the lease is given back (a record a
		// last-mode execution committed, if any, is complete and has none:
		// the fenced yield matches nothing).
		e.observe(ctx, Event{Kind: EventAmbiguous, Operation: c.op.ID})
		e.yield(c)
		e.hooks.run(e.hooks.afterEnd)
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
	case (committed || foreignTried) && errors.Is(err, errPoolExhausted):
		// No connection for the next phase: nothing of it ran, but what
		// ran before it may have had effects. The record is kept and its
		// lease given back, so that a retry resumes at once.
		e.yield(c)
		e.hooks.run(e.hooks.afterEnd)
		return nil, errPoolExhausted
	case errors.Is(err, ErrFenced):
		e.observe(ctx, Event{Kind: EventFenced, Operation: c.op.ID})
		return nil, &Error{Kind: idemtype.KindInFlight, RetryAfter: time.Second, Err: err,
			Detail: "another execution took this key over; retry to get its result"}
	case !committed && (declared || !foreignTried):
		// Nothing of this execution was committed and, unless the phase said
		// so, no foreign call was attempted: no effect exists. The release
		// is conditional on the recovery point: a commit that failed only in
		// its acknowledgement leaves the record in place, as ambiguous.
		rctx, cancel := context.WithTimeout(ctx, e.opts.PoolWait) // the store's failure (503) past it
		released, derr := e.store.release(rctx, c)
		cancel()
		if derr != nil {
			// The key is still claimed, bound to this request: the phase's
			// answer would tell the client it is free, and its corrected
			// request under the same key would get 422. The store's failure
			// is the answer (503, or 500 when retrying cannot help); the
			// same request, retried, takes the key over (at once if the
			// lease could be given back) and frees it.
			e.yield(c)
			e.hooks.run(e.hooks.afterEnd)
			return nil, e.storeFailed(ctx, c.op, "release", derr)
		}
		if released {
			e.observe(ctx, Event{Kind: EventRelease, Operation: c.op.ID})
			e.hooks.run(e.hooks.afterEnd)
			return nil, err
		}
	case declared:
		// Logged with the failure (report): the phase asked for a release
		// it cannot have.
		c.releaseRefused = true
	}
	e.observe(ctx, Event{Kind: EventAmbiguous, Operation: c.op.ID})
	failure := &Error{Kind: idemtype.KindFailed, Err: err, RetryAfter: time.Second,
		Detail: "the request failed after it may have had effects; retry with the same key to resume it from its last completed step"}
	if rule != nil {
		// The code breaks the rule again on every resumed run.
		failure.RetryAfter = 0
		failure.Detail = "the service could not handle this request; its log says why, and a retry with the same key fails the same way until the service is fixed"
	} else if deterministic(err) {
		// A statement the database refuses fails the resumed execution
		// the same way: no Retry-After, which clients would follow for ever.
		failure.RetryAfter = 0
		failure.Detail = "the request failed after it may have had effects, on a statement the database refuses; a retry with the same key resumes it, and fails the same way until the cause is fixed"
	}
	if c.policy.Ambiguous == idemtype.AmbiguousStore {
		failure.RetryAfter = 0
		failure.Detail = "the request failed after it may have had effects; this answer is stored, and a retry with the same key gets it again"
		resp := e.refusal(failure)
		resp.Header = e.storedHeaders(c, resp.Header) // sent as stored
		serr := e.storeFailure(ctx, c, resp)
		if serr == nil {
			e.observe(ctx, Event{Kind: EventComplete, Operation: c.op.ID})
			return &Outcome{Response: resp, Resumed: c.resumed, FailedPhase: c.phase}, nil
		}
		if errors.Is(serr, ErrFenced) {
			e.observe(ctx, Event{Kind: EventFenced, Operation: c.op.ID})
		}
	}
	e.yield(c)
	e.hooks.run(e.hooks.afterEnd)
	return nil, failure
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
	// Within PoolWait: on an exhausted pool the lease expires by itself.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), e.opts.PoolWait)
	defer cancel()
	if err := e.store.yield(ctx, c); err != nil {
		e.logStoreError(c.ctx, slog.LevelWarn, c.op.ID, "yield (the lease expires by itself)", err)
	}
}
