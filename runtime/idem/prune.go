package idem

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Prune deletes records past their retention, oldest first, at most batch
// rows per transaction, until none remain or ctx ends: PruneWith with no
// rest between batches.
func (e *Engine) Prune(ctx context.Context, batch int) (int64, error) {
	return e.PruneWith(ctx, PruneOptions{Batch: batch})
}

// PruneOptions tune PruneWith.
type PruneOptions struct {
	// Batch is the most records one transaction deletes (default 1000).
	Batch int
	// Rest is how long the pruner pauses after each batch, as a multiple of
	// the time the batch took: with 1 the pruner runs at most half of the
	// time and leaves the database's WAL and CPU to claims in between
	// (measured beside claims, it pruned at a third of its full pace:
	// docs/operations.md). 0 prunes at full pace.
	Rest float64
}

// PruneWith deletes records past their retention, oldest first, in batches,
// until none remain or ctx ends. It returns how many it deleted. A record
// it skipped (locked, or not yet freeable) is left for the next prune.
//
// A batch is one range of expires_at, deleted by one scan of its index.
// Where a row of the range is held by another transaction (another
// pruner's batch, a claim of the same key), the batch waits at most
// pruneLockWait for it, then locks its rows with SKIP LOCKED instead, so many
// processes can prune at once, and a claim of the same key waits for at
// most one batch's transaction. A claimed record is deleted only once its
// lease has also expired and only if no phase of it committed: a running
// execution is never pruned under its owner, and a half-done one waits for
// its owner, a retry, the completer or an operator (see Abandoned), whatever
// its age. After the last batch, PruneWith reports how many such records
// are stuck past their retention (EventStuck).
func (e *Engine) PruneWith(ctx context.Context, o PruneOptions) (int64, error) {
	batch := o.Batch
	if batch <= 0 {
		batch = 1000
	}
	if !(o.Rest >= 0) || math.IsInf(o.Rest, 1) {
		return 0, fmt.Errorf("idem: prune: Rest %v: want a finite number, 0 or more", o.Rest)
	}
	var total int64
	// Each batch starts at the expires_at where the previous one ended.
	var from time.Time
	for {
		began := time.Now()
		n, next, last, err := e.pruneBatch(ctx, batch, from)
		if err != nil {
			return total, fmt.Errorf("idem: prune: %w", err)
		}
		if next != nil {
			from = *next
		}
		total += n
		if n > 0 {
			e.observe(ctx, Event{Kind: EventPruned, Count: n})
		}
		if last {
			stuck, err := e.countStuck(ctx)
			if err != nil {
				return total, fmt.Errorf("idem: prune: counting stuck records: %w", err)
			}
			e.observe(ctx, Event{Kind: EventStuck, Count: stuck})
			return total, nil
		}
		if o.Rest > 0 {
			rest := time.NewTimer(time.Duration(o.Rest * float64(time.Since(began))))
			select {
			case <-rest.C:
			case <-ctx.Done():
				rest.Stop()
			}
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// pruneLockWait is how long a batch waits for any one row another
// transaction holds before it skips the held rows instead (pruneSQL's
// lock_timeout).
const pruneLockWait = "20ms"

// pruneBatch deletes one batch from the expires_at from on. It returns how
// many records it deleted, where the next batch starts (nil: where it
// was), and whether this was the last batch.
func (e *Engine) pruneBatch(ctx context.Context, batch int, from time.Time) (n int64, next *time.Time, last bool, err error) {
	var first, upto *time.Time
	if err := e.pool.QueryRow(ctx, e.q.pruneBoundSQL, batch, from).Scan(&first, &upto); err != nil {
		return 0, nil, false, err
	}
	switch {
	case first == nil:
		// Nothing past its retention is left.
		return 0, nil, true, nil
	case upto == nil:
		// The last batch: at most batch records are left.
		return e.pruneSkipping(ctx, batch, *first)
	case upto.Equal(*first):
		// More than a batch expires in one instant: a range cannot split
		// them.
		return e.pruneSkipping(ctx, batch, *first)
	}
	err = e.pool.QueryRow(ctx, e.q.pruneSQL, *first, *upto, pruneLockWait).Scan(&n)
	if sqlState(err) == lockNotAvailable {
		// A row of the range is held: this batch skips what is held.
		return e.pruneSkipping(ctx, batch, *first)
	}
	if err != nil {
		return 0, nil, false, err
	}
	return n, upto, false, nil
}

// pruneSkipping deletes the oldest batch freeable records from from on
// that no other transaction holds.
func (e *Engine) pruneSkipping(ctx context.Context, batch int, from time.Time) (n int64, next *time.Time, last bool, err error) {
	if err := e.pool.QueryRow(ctx, e.q.pruneSkippingSQL, batch, from).Scan(&n, &next); err != nil {
		return 0, nil, false, err
	}
	return n, next, n < int64(batch), nil
}

// countStuck counts the records Abandoned(ctx, true, ...) would list.
func (e *Engine) countStuck(ctx context.Context) (int64, error) {
	var n int64
	err := e.pool.QueryRow(ctx, e.q.countStuckSQL).Scan(&n)
	return n, err
}
