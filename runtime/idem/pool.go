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

// A held is a connection an execution holds while the operation's code
// runs on it, and whether it took a turn for it: give it back with
// Engine.giveBack.
type held struct {
	pc   *pgxpool.Conn
	turn bool
}

// acquireHeld acquires a connection that the execution holds while the
// operation's code runs, after its turn: within Options.PoolWait, or
// errPoolExhausted.
func (e *Engine) acquireHeld(ctx context.Context) (held, error) {
	return e.acquireTurn(ctx, true)
}

// withHeld runs fn on a connection held as acquireHeld's, for a request
// without a key: unprotected, it waits for its turn as long as its context
// lets it (a 503 would have its client run again what committed), and
// gives the turn back however fn ends.
func (e *Engine) withHeld(ctx context.Context, fn func(*pgxpool.Conn) error) error {
	h, err := e.acquireTurn(ctx, false)
	if err != nil {
		return err
	}
	defer e.giveBack(h)
	return fn(h.pc)
}

// giveBack releases h's connection and its turn.
func (e *Engine) giveBack(h held) {
	h.pc.Release()
	if h.turn {
		<-e.held
	}
}

// acquireTurn takes a turn and a connection; bounded, within PoolWait.
// When a turn is free and the pool has room (an idle connection, or room
// for a new one), it waits for neither and sets no timer: the common case
// costs a channel send and the pool's statistics.
func (e *Engine) acquireTurn(ctx context.Context, bounded bool) (held, error) {
	var h held
	if e.held != nil {
		select {
		case e.held <- struct{}{}:
			h.turn = true
		default:
		}
	}
	if h.turn || e.held == nil {
		if st := e.pool.Stat(); st.IdleConns() > 0 || st.TotalConns() < st.MaxConns() {
			pc, err := e.pool.Acquire(ctx)
			if err != nil {
				e.giveTurn(h)
				return held{}, err
			}
			h.pc = pc
			e.exhausted.Store(false)
			return h, nil
		}
	}
	wctx := ctx
	if bounded {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, e.opts.PoolWait)
		defer cancel()
	}
	if e.held != nil && !h.turn {
		select {
		case e.held <- struct{}{}:
			h.turn = true
		case <-wctx.Done():
			if ctx.Err() != nil {
				return held{}, context.Cause(ctx) // the request ended first
			}
			return held{}, e.poolExhausted(ctx, "a turn to hold a connection")
		}
	}
	pc, err := e.pool.Acquire(wctx)
	if err != nil {
		e.giveTurn(h)
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return held{}, e.poolExhausted(ctx, "a connection")
		}
		return held{}, err
	}
	h.pc = pc
	e.exhausted.Store(false)
	return h, nil
}

// keepFor is a session on pc, a connection acquired without a turn, that
// the execution keeps while the operation's code runs: with a turn taken
// at once when one is free; otherwise pc goes back, not held while the
// turn is waited for, and the session is on a connection acquired after
// it (acquireHeld). No transaction may be open on pc.
func (e *Engine) keepFor(ctx context.Context, pc *pgxpool.Conn) (*session, error) {
	if e.held == nil {
		return newSession(pc), nil
	}
	select {
	case e.held <- struct{}{}:
		s := newSession(pc)
		s.e = e
		return s, nil
	default:
	}
	pc.Release()
	return e.heldSession(ctx)
}

// giveTurn gives back h's turn, if it took one.
func (e *Engine) giveTurn(h held) {
	if h.turn {
		<-e.held
	}
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
