package idem

import (
	"testing"
	"time"
)

// TestPrunePace: the rest a pruner owes follows its work, in pauses the
// server can take (whole milliseconds), whatever those pauses really took.
func TestPrunePace(t *testing.T) {
	const ms = time.Millisecond
	pauses := func(p *prunePace, n int, took time.Duration) []time.Duration {
		var out []time.Duration
		for range n {
			d := p.pause()
			out = append(out, d)
			if d > 0 {
				p.slept += took
			}
		}
		return out
	}
	p := prunePace{rest: 1}
	// The first trip has nothing to go by: its whole rest comes after it.
	if got := pauses(&p, 10, 0); got[9] != 0 {
		t.Fatalf("first trip's pauses = %v; want none", got)
	}
	if d := p.trip(10*ms, 10); d != 10*ms {
		t.Fatalf("rest after a first trip of 10 ms = %v; want 10ms", d)
	}
	// A batch's work is known now (1 ms): a pause of 1 ms after each. The
	// server oversleeps each by 1 ms; the work is as estimated (30 ms,
	// less the 20 slept).
	for i, d := range pauses(&p, 10, 2*ms) {
		if d != ms {
			t.Fatalf("pause %d = %v; want 1ms", i, d)
		}
	}
	if d := p.trip(30*ms, 10); d != 0 {
		t.Fatalf("rest after a trip that overslept = %v; want none", d)
	}
	// The 10 ms overslept were rest taken ahead: the next ten batches
	// owe no pause.
	for i, d := range pauses(&p, 10, ms) {
		if d != 0 {
			t.Fatalf("pause %d after oversleeping = %v; want none", i, d)
		}
	}
	// A trip whose work took longer than estimated owes the difference
	// after it: 15 ms of work, 10 estimated.
	if d := p.trip(15*ms, 10); d != 5*ms {
		t.Fatalf("rest after a trip of 15 ms estimated at 10 = %v; want 5ms", d)
	}
	// Half a millisecond of work a batch: a pause after every other batch.
	p = prunePace{rest: 1, perBatch: ms / 2}
	if got := pauses(&p, 4, ms); got[0] != 0 || got[1] != ms || got[2] != 0 || got[3] != ms {
		t.Fatalf("pauses at half a millisecond a batch = %v; want [0 1ms 0 1ms]", got)
	}
	// No rest, no pause.
	p = prunePace{perBatch: 5 * ms}
	if got := pauses(&p, 3, ms); got[0]+got[1]+got[2] != 0 || p.trip(20*ms, 3) != 0 {
		t.Fatalf("pauses with no rest = %v; want none", got)
	}
}
