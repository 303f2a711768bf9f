package idem

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

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
		k.e.logStoreError(k.c.ctx, slog.LevelWarn, k.c.op.ID, "refresh", err)
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
