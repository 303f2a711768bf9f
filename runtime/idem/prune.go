package idem

import (
	"context"
	"fmt"
	"time"
)

// Prune deletes records past their retention, oldest first, at most batch
// rows per transaction, until none remain or ctx ends. It returns how many
// it deleted. A record it skipped (locked, or not yet freeable) is left for
// the next Prune.
//
// Each batch locks its rows with SKIP LOCKED, so many processes can prune at
// once without waiting on each other, and a claim of the same key waits for
// at most one batch's transaction. A claimed record is deleted only once its
// lease has also expired and only if no phase of it committed: a running
// execution is never pruned under its owner, and a half-done one waits for
// its owner, a retry, the completer or an operator (see Abandoned), whatever
// its age. After the last batch, Prune reports how many such records are
// stuck past their retention (EventStuck).
func (e *Engine) Prune(ctx context.Context, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	var total int64
	// Each batch starts at the expires_at where the previous one ended.
	var from time.Time
	for {
		var n int64
		var last *time.Time
		if err := e.pool.QueryRow(ctx, e.q.pruneSQL, batch, from).Scan(&n, &last); err != nil {
			return total, fmt.Errorf("idem: prune: %w", err)
		}
		if last != nil {
			from = *last
		}
		total += n
		if n > 0 {
			e.observe(ctx, Event{Kind: EventPruned, Count: n})
		}
		if n < int64(batch) {
			stuck, err := e.countStuck(ctx)
			if err != nil {
				return total, fmt.Errorf("idem: prune: counting stuck records: %w", err)
			}
			e.observe(ctx, Event{Kind: EventStuck, Count: stuck})
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// countStuck counts the records Abandoned(ctx, true, ...) would list.
func (e *Engine) countStuck(ctx context.Context) (int64, error) {
	var n int64
	err := e.pool.QueryRow(ctx, e.q.countStuckSQL).Scan(&n)
	return n, err
}
