package idem

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// resumer finishes an abandoned record of one operation from its stored
// request payload.
type resumer func(ctx context.Context, c *claim, payload []byte) (*Outcome, error)

// RegisterCompleter lets the background completer finish abandoned records
// of op (an operation with Complete: background). build turns the stored
// request payload back into the operation's phases.
func RegisterCompleter[S any](e *Engine, op *Operation, build func(payload []byte) ([]Phase[S], error)) {
	e.resume[op.ID] = func(ctx context.Context, c *claim, payload []byte) (*Outcome, error) {
		var phases []Phase[S]
		err := recovered("(decoding the stored request)", func() error {
			var err error
			phases, err = build(payload)
			return err
		})
		if err != nil {
			// Nothing ran: give the lease back for a later pass.
			e.yield(c)
			return nil, err
		}
		if err := checkPhases(phases); err != nil {
			return nil, err
		}
		return execute(ctx, e, c, phases)
	}
	e.ops = append(e.ops, op)
}

// completeAbandoned is idemadmin.CompleteAbandoned, documented there.
func (e *Engine) completeAbandoned(ctx context.Context, limit int) (int, error) {
	if len(e.ops) == 0 {
		return 0, nil
	}
	if err := e.store.detect(ctx); err != nil {
		return 0, err
	}
	ids := make([]string, 0, len(e.ops))
	byID := map[string]*Operation{}
	for _, op := range e.ops {
		ids = append(ids, op.ID)
		byID[op.ID] = op
	}
	// A record that keeps failing is left to an operator
	// (Options.CompleterAttempts).
	found, err := e.store.abandonedBackground(ctx, ids, e.opts.CompleterAttempts, limit)
	if err != nil {
		return 0, fmt.Errorf("idem: completer: %w", err)
	}
	done := 0
	var errs []error
	for _, a := range found {
		op := byID[a.op]
		p, err := e.policy(op)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ok, err := e.completeOne(ctx, op, p, a, a.fp, a.payload)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			done++
		}
	}
	return done, errors.Join(errs...)
}

// completeOne takes one abandoned record over from owner and runs its
// remaining phases from the stored payload, as one request of its own for
// the tracer. It reports whether it completed the record; a record a retry
// or another completer took first is neither completed nor an error.
func (e *Engine) completeOne(ctx context.Context, op *Operation, p Policy, a abandonedRecord, fp, payload []byte) (done bool, err error) {
	ctx, end := e.start(ctx, Step{Kind: StepRequest, Operation: op.ID, Background: true})
	defer func() { end(err) }()
	key := a.key
	c := &claim{op: op, policy: p, ns: a.ns, scope: a.scope, key: key, id: a.id, placement: a.placement, token: newToken(), keyLength: e.keyLength(),
		fingerprint: fp, background: true, ctx: context.WithoutCancel(ctx)}
	ok, err := e.store.takeover(ctx, c, &a.owner)
	if err != nil || !ok {
		return false, err // !ok: a retry or another completer got there first
	}
	// The record keeps its scope's digest from key derivation 3 on, and
	// the scope itself before (Takeover returned the record's derivation).
	c.scopeDigest = a.scope
	if c.derivation < keyDerivationV3 {
		c.scopeDigest = scopeDigest(a.scope)
	}
	e.observe(ctx, Event{Kind: EventTakeover, Operation: op.ID, Cause: TakeoverCompleter})
	e.observeFailover(ctx, c)
	// The phases run under c.ctx, which the completer's shutdown does not
	// cancel: a phase it began ends (or its lease runs out, which fences
	// it), as on the request path.
	_, err = e.resume[op.ID](c.ctx, c, payload)
	e.waits.kick(c.id)
	if err != nil {
		e.observe(ctx, Event{Kind: EventCompleterFailed, Operation: op.ID, Err: err})
		return false, fmt.Errorf("%s key %q: %w", op.ID, key, err)
	}
	e.observe(ctx, Event{Kind: EventCompleterRun, Operation: op.ID})
	return true, nil
}

// RunCompleter calls CompleteAbandoned every interval until ctx ends,
// logging errors.
func (e *Engine) RunCompleter(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var pe *PhaseError
		if _, err := e.completeAbandoned(ctx, 100); err != nil && ctx.Err() == nil && !errors.As(err, &pe) {
			// A PhaseError was logged where the execution failed.
			e.log.WarnContext(ctx, "idem: completer", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
