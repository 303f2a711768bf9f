package idem

import (
	"slices"
	"testing"
	"time"
)

// TestPrunePace: the rest a pruner owes follows its work, in pauses the
// server can take (whole milliseconds, at most pruneMaxPause), whatever
// those pauses really took.
func TestPrunePace(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	// pauses asks for n pauses, of which the server takes the first
	// taken, each lasting took (0: as long as asked).
	pauses := func(p *prunePace, n, taken int, took time.Duration) []time.Duration {
		var out []time.Duration
		for i := range n {
			d := p.pause()
			out = append(out, d)
			if d > 0 && i < taken {
				p.slept += orAsked(took, d)
			}
		}
		return out
	}
	ones := slices.Repeat([]time.Duration{ms}, 10)
	p := prunePace{rest: 1}
	// The first trip has nothing to go by: its whole rest comes after it.
	if got := pauses(&p, 10, 10, 0); !slices.Equal(got, make([]time.Duration, 10)) {
		t.Fatalf("first trip's pauses = %v; want none", got)
	}
	if d := p.trip(10*ms, 10); d != 10*ms {
		t.Fatalf("rest after a first trip of 10 ms = %v; want 10ms", d)
	}
	// A batch's work is known now (1 ms): a pause of 1 ms after each. The
	// server oversleeps each by 1 ms; the work is as estimated (30 ms,
	// less the 20 slept), so nothing is owed after the trip.
	if got := pauses(&p, 10, 10, 2*ms); !slices.Equal(got, ones) {
		t.Fatalf("pauses at 1 ms a batch = %v; want 1ms each", got)
	}
	if d := p.trip(30*ms, 10); d != 0 {
		t.Fatalf("rest after a trip that overslept = %v; want none", d)
	}
	// Rest taken beyond a trip's due is not carried over: the next trip
	// pauses as before. Its work took longer than estimated, 15 ms: 5 ms
	// are owed after it.
	if got := pauses(&p, 10, 10, 0); !slices.Equal(got, ones) {
		t.Fatalf("pauses after a trip that overslept = %v; want 1ms each", got)
	}
	if d := p.trip(25*ms, 10); d != 5*ms {
		t.Fatalf("rest after a trip of 15 ms of work estimated at 10 = %v; want 5ms", d)
	}
	// A trip whose third batch failed: three batches ran (4.5 ms of
	// work), two pauses were taken (2 ms); the rest of its work is owed,
	// not the pauses it asked for and never took.
	p = prunePace{rest: 1, perBatch: ms}
	pauses(&p, 10, 2, 0)
	if d := p.trip(6500*time.Microsecond, 3); d != 2500*time.Microsecond {
		t.Fatalf("rest after a trip that failed at its third batch = %v; want 2.5ms", d)
	}
	// Half a millisecond of work a batch: a pause after every other batch.
	p = prunePace{rest: 1, perBatch: ms / 2}
	if got := pauses(&p, 4, 4, 0); !slices.Equal(got, []time.Duration{0, ms, 0, ms}) {
		t.Fatalf("pauses at half a millisecond a batch = %v; want [0 1ms 0 1ms]", got)
	}
	// After a trip that stalled, a batch's work looks like a second: no
	// pause in the server exceeds pruneMaxPause. Were the work that long,
	// the rest beyond the pauses would be owed after the trip, without a
	// connection; where it was 1 ms a batch, the pauses covered it, and
	// the estimate is back to 1 ms.
	p = prunePace{rest: 1}
	p.trip(10*time.Second, 10)
	if got := pauses(&p, 2, 2, 0); got[0] != pruneMaxPause || got[1] != pruneMaxPause {
		t.Fatalf("pauses after a stalled trip = %v; want %v each", got, pruneMaxPause)
	}
	long := p
	if d := long.trip(2*time.Second+2*pruneMaxPause, 2); d != 2*time.Second-2*pruneMaxPause {
		t.Fatalf("rest after two batches of a second each = %v; want %v", d, 2*time.Second-2*pruneMaxPause)
	}
	if d := p.trip(2*ms+2*pruneMaxPause, 2); d != 0 || p.perBatch != ms {
		t.Fatalf("rest after a normal trip that followed a stall = %v, a batch's work %v; want none, 1ms", d, p.perBatch)
	}
	// No rest, no pause.
	p = prunePace{perBatch: 5 * ms}
	if got := pauses(&p, 3, 3, 0); !slices.Equal(got, make([]time.Duration, 3)) || p.trip(20*ms, 3) != 0 {
		t.Fatalf("pauses with no rest = %v; want none", got)
	}
}

// orAsked returns took, or d when took is 0.
func orAsked(took, d time.Duration) time.Duration {
	if took == 0 {
		return d
	}
	return took
}
