package idem

import (
	"sync"
	"sync/atomic"
	"time"
)

// durations remembers how long each operation's executions take: an
// exponentially weighted mean of the recent ones (each new one counts a
// quarter), per operation, in this process. A duplicate that finds the key
// in flight is told to come back when the execution is likely done
// (Engine.retryAfter), not when its lease ends: a 3 s execution under a
// 30 s lease sent duplicates away for up to 30 s.
type durations struct {
	byOp sync.Map // operation ID -> *atomic.Int64, nanoseconds; 0: none yet
}

// observe records one execution of op that took took.
func (d *durations) observe(op string, took time.Duration) {
	if took <= 0 {
		return
	}
	v, ok := d.byOp.Load(op)
	if !ok {
		v, _ = d.byOp.LoadOrStore(op, new(atomic.Int64))
	}
	mean := v.(*atomic.Int64)
	for {
		old := mean.Load()
		next := int64(took)
		if old > 0 {
			next = old + (int64(took)-old)/4
		}
		if mean.CompareAndSwap(old, next) {
			return
		}
	}
}

// typical is op's mean execution time, and false before any was observed.
func (d *durations) typical(op string) (time.Duration, bool) {
	v, ok := d.byOp.Load(op)
	if !ok {
		return 0, false
	}
	n := v.(*atomic.Int64).Load()
	return time.Duration(n), n > 0
}

// retryAfter is how long a duplicate of op should wait for the execution
// that holds its key, whose lease has leaseLeft to run (at least a second):
// the operation's typical execution time, rounded to whole seconds (what
// Retry-After carries), at least MinRetryAfter and at most the lease left;
// the lease left when no execution of op has completed here yet.
func (e *Engine) retryAfter(op *Operation, leaseLeft time.Duration) time.Duration {
	d, ok := e.durations.typical(op.ID)
	if !ok {
		return leaseLeft
	}
	return min(max(d.Round(time.Second), MinRetryAfter), leaseLeft)
}

// MinRetryAfter is the shortest Retry-After the engine sends a duplicate:
// a second, the header's unit.
const MinRetryAfter = time.Second
