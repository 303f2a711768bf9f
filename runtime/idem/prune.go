package idem

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/runtime/internal/adminlink"
)

// prune is idemadmin.Prune, documented there.
func (e *Engine) prune(ctx context.Context, o adminlink.PruneOptions) (int64, error) {
	batch := o.Batch
	if batch <= 0 {
		batch = 1000
	}
	if !(o.Rest >= 0 && o.Rest <= pruneMaxRest) {
		return 0, fmt.Errorf("idem: prune: Rest %v: want a number from 0 to %v", o.Rest, pruneMaxRest)
	}
	if err := e.store.detect(ctx); err != nil {
		return 0, fmt.Errorf("idem: prune: %w", err)
	}
	var total int64
	// Each round trip starts at the expires_at where the previous one
	// ended.
	var from time.Time
	pace := prunePace{rest: o.Rest}
	for {
		began := time.Now()
		counts, next, last, err := e.pruneTrip(ctx, batch, from, &pace)
		for _, n := range counts {
			total += n
			if n > 0 {
				e.observe(ctx, Event{Kind: EventPruned, Count: n})
			}
		}
		if err != nil {
			return total, fmt.Errorf("idem: prune: %w", err)
		}
		if next != nil {
			from = *next
		}
		if last {
			stuck, err := e.store.countStuck(ctx)
			if err != nil {
				return total, fmt.Errorf("idem: prune: counting stuck records: %w", err)
			}
			e.observe(ctx, Event{Kind: EventStuck, Count: stuck})
			return total, nil
		}
		if d := pace.trip(time.Since(began), len(counts)); d > 0 {
			rest := time.NewTimer(d)
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

// prunePace spreads a pruner's rest (PruneOptions.Rest) over its batches.
// It estimates a batch's work from the round trip before, owes rest times
// that after each batch, and has the server pause in whole milliseconds
// where the owed rest reaches one, up to pruneMaxPause a pause. At the end
// of a trip it owes rest times the trip's work, less the pauses the server
// took (an overslept one counts as rest), and takes what is left then. A
// pause not taken (its batch failed) is owed again; rest taken beyond what
// a trip owed is not carried over, so one stalled trip, which makes the
// next trip's estimate long, never buys the trips after it a rest-free run.
type prunePace struct {
	rest     float64
	perBatch time.Duration // a batch's work, as the last trip measured it
	owed     time.Duration // in this trip: rest owed on perBatch's estimate and not yet asked of the server
	slept    time.Duration // in this trip: how long the server's pauses took
}

// pruneMaxRest is the largest PruneOptions.Rest: a pruner resting a
// thousand times its work deletes a batch every few seconds, and beyond
// it rest times a trip's work could overflow a time.Duration.
const pruneMaxRest = 1000

// pruneMaxPause bounds one pause in the server: after a trip that stalled
// (a wait for a connection, a slow disk) the estimate of a batch's work is
// long, and a pause holds the trip's connection. The rest beyond it is
// taken after the trip, without a connection.
const pruneMaxPause = 50 * time.Millisecond

// pause returns the pause to ask of the server after one more batch: the
// owed rest in whole milliseconds (pg_sleep sleeps no shorter than one),
// at most pruneMaxPause.
func (p *prunePace) pause() time.Duration {
	p.owed += time.Duration(p.rest * float64(p.perBatch))
	d := min(max(p.owed.Truncate(time.Millisecond), 0), pruneMaxPause)
	p.owed -= d
	return d
}

// trip ends a round trip that took elapsed, pauses included, for batches
// batches: it learns a batch's work from it and returns the rest still
// owed for its work, to be taken now.
func (p *prunePace) trip(elapsed time.Duration, batches int) time.Duration {
	work := max(elapsed-p.slept, 0)
	if batches > 0 {
		p.perBatch = work / time.Duration(batches)
	}
	d := max(time.Duration(p.rest*float64(work))-p.slept, 0)
	p.owed, p.slept = 0, 0
	return d
}

// pruneRestEarly is how much sooner than a pause's end the server is asked
// to wake: pg_sleep waits in whole milliseconds and waits another for what
// is left after an early wake-up, so that asked for exactly 1 ms it sleeps
// about 2 (measured here).
const pruneRestEarly = 200 * time.Microsecond

// pruneLockWait is how long a batch waits for any one row another
// transaction holds before it skips the held rows instead (Prune's
// lock_timeout).
const pruneLockWait = "20ms"

// pruneTripBatches is how many range batches one round trip carries.
// A round trip per batch cost the pruner more than its deletes did
// (docs/scaling.md, "The prune and the claims"): beside claims, ten a
// round trip kept their p99 lower at a higher pace than five did, so
// batches can stay small (a claim's commit flushes at most a few small
// batches' WAL ahead of its own) without costing the pruner its pace.
const pruneTripBatches = 10

// pruneBound is a row of PruneBounds: where a batch's range starts
// (and the previous one's ends), and whether the record before it expires
// in the same instant.
type pruneBound struct {
	at   time.Time
	tied bool
}

// pruneTrip deletes up to pruneTripBatches batches from the expires_at
// from on: one statement finds their ranges, one round trip deletes
// them, each batch in a transaction of its own. It returns how many
// records each committed batch deleted, where the next trip starts (nil:
// where it was), and whether this was the last trip.
func (e *Engine) pruneTrip(ctx context.Context, batch int, from time.Time, pace *prunePace) (counts []int64, next *time.Time, last bool, err error) {
	bounds, err := e.store.pruneBounds(ctx, batch, from)
	if err != nil {
		return nil, nil, false, err
	}
	if len(bounds) == 0 {
		// Nothing past its retention is left.
		return nil, nil, true, nil
	}
	// The ranges [bounds[i], bounds[i+1]), up to the first that is empty
	// (more than a batch expires in one instant there, and a range cannot
	// split them) or that starts within an instant (it would also take the
	// records of that instant before its bound, more than a batch): the
	// next trip starts there.
	ranges := 0
	for ranges+1 < len(bounds) && bounds[ranges+1].at.After(bounds[ranges].at) &&
		(ranges == 0 || !bounds[ranges].tied) {
		ranges++
	}
	if ranges == 0 {
		// The last batch (at most batch records left), or a batch that
		// expires in one instant.
		n, next, last, err := e.store.pruneSkipping(ctx, batch, bounds[0].at)
		return []int64{n}, next, last, err
	}
	counts, err = e.store.pruneRanges(ctx, bounds[:ranges+1], pace)
	if sqlState(err) == lockNotAvailable {
		// A row of the next range is held: that batch skips what is held.
		n, next, last, err := e.store.pruneSkipping(ctx, batch, bounds[len(counts)].at)
		return append(counts, n), next, last, err
	}
	if err != nil {
		return counts, nil, false, err
	}
	return counts, &bounds[ranges].at, false, nil
}
