package idem

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// DefaultPoolWait is Options.PoolWait's default.
const DefaultPoolWait = 5 * time.Second

// An execution holds a pooled connection while the operation's code runs
// on it (a first or last claim's transaction with its local phases or its
// handler, a local phase's or step's own transaction, a handler's final
// one, a render's). That code may also query the pool directly and wait
// for a second connection: when as many executions hold one as the pool
// has, each waits for the others for ever. So at most the pool's size
// less Options.PoolHeadroom executions hold one at once (Engine.held);
// the rest wait for a turn holding nothing, and the headroom serves what
// holds a connection only for a statement (the code's direct queries, the
// engine's reads and lease renewals). docs/operations.md gives the sizing.

// errPoolExhausted is the answer of an execution that got no turn and no
// connection within Options.PoolWait: 503 with Retry-After.
var errPoolExhausted = &Error{Kind: idemtype.KindUnavailable, RetryAfter: time.Second,
	Detail: "the service's database connections are all in use; retry with the same key"}

// acquireHeld acquires a connection that the execution holds while the
// operation's code runs, after its turn: within Options.PoolWait, or
// errPoolExhausted. release gives both back.
func (e *Engine) acquireHeld(ctx context.Context) (pc *pgxpool.Conn, release func(), err error) {
	wctx, cancel := context.WithTimeout(ctx, e.opts.PoolWait)
	defer cancel()
	return e.acquireTurn(ctx, wctx)
}

// withHeld runs fn on a connection held as acquireHeld's, for a request
// without a key: unprotected, it waits for its turn as long as its context
// lets it (a 503 would have its client run again what committed), and
// gives the turn back however fn ends.
func (e *Engine) withHeld(ctx context.Context, fn func(*pgxpool.Conn) error) error {
	pc, release, err := e.acquireTurn(ctx, ctx)
	if err != nil {
		return err
	}
	defer release()
	return fn(pc)
}

// acquireTurn is acquireHeld waiting within wctx, a context of ctx.
func (e *Engine) acquireTurn(ctx, wctx context.Context) (pc *pgxpool.Conn, release func(), err error) {
	turn := func() {}
	if e.held != nil {
		select {
		case e.held <- struct{}{}:
			turn = func() { <-e.held }
		case <-wctx.Done():
			if ctx.Err() != nil {
				return nil, nil, context.Cause(ctx) // the request ended first
			}
			return nil, nil, e.poolExhausted(ctx, "a turn to hold a connection")
		}
	}
	pc, err = e.pool.Acquire(wctx)
	if err != nil {
		turn()
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, nil, e.poolExhausted(ctx, "a connection")
		}
		return nil, nil, err
	}
	e.exhausted.Store(false)
	return pc, func() { pc.Release(); turn() }, nil
}

// poolExhausted logs, once until the pool has room again, that the wait
// for what is named ran out, with what to size; and answers
// errPoolExhausted.
func (e *Engine) poolExhausted(ctx context.Context, what string) error {
	if !e.exhausted.Swap(true) {
		st := e.pool.Stat()
		e.log.LogAttrs(ctx, slog.LevelError, "idem: pool exhausted: executions waited longer than Options.PoolWait for "+what+
			"; raise the pool's MaxConns (an execution holds one connection while the operation's code runs, and the code's own queries need Options.PoolHeadroom more), or lower the concurrency",
			slog.Int("max_conns", int(st.MaxConns())), slog.Int("acquired_conns", int(st.AcquiredConns())),
			slog.Int("executions_holding", len(e.held)), slog.Int("headroom", e.opts.PoolHeadroom), slog.Duration("pool_wait", e.opts.PoolWait))
	}
	return errPoolExhausted
}

// detect is store.detect on the request path: its first call waits for a
// connection within Options.PoolWait, as an execution does.
func (e *Engine) detect(ctx context.Context) error {
	if e.store.detected.Load() {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, e.opts.PoolWait)
	defer cancel()
	err := e.store.detect(wctx)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return e.poolExhausted(ctx, "a connection")
	}
	return err
}
