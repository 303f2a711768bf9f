package idemprom

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestObserver: events are counted by operation and kind; an operation's
// rare events exist at zero from its first event on, so that an alert's
// increase() sees the first of them (a counter that first appears at 1
// increases by nothing).
func TestObserver(t *testing.T) {
	reg := prometheus.NewRegistry()
	o, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	o.Observe(idem.Event{Kind: idem.EventClaim, Operation: "pay"})
	o.Observe(idem.Event{Kind: idem.EventReplay, Operation: "pay"})
	o.Observe(idem.Event{Kind: idem.EventReplay, Operation: "pay"})
	o.Observe(idem.Event{Kind: idem.EventPhase, Operation: "pay", Phase: "charge", Duration: 3 * time.Millisecond, Err: errors.New("x")})
	o.Observe(idem.Event{Kind: idem.EventPruned, Count: 7})
	o.Observe(idem.Event{Kind: idem.EventStuck, Count: 3})
	o.Observe(idem.Event{Kind: idem.EventWeakKey, Operation: "pay", Cause: "numeric"})
	if got := testutil.ToFloat64(o.weakKeys.WithLabelValues("pay", "numeric")); got != 1 {
		t.Errorf("weak keys = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(o.weakKeys); got != 3 {
		t.Errorf("weak key series = %d, want one per reason, made at zero", got)
	}
	if got := testutil.ToFloat64(o.events.WithLabelValues("pay", "replay")); got != 2 {
		t.Errorf("replays = %v, want 2", got)
	}
	if got := testutil.ToFloat64(o.stuck); got != 3 {
		t.Errorf("stuck = %v, want 3", got)
	}
	if got := testutil.ToFloat64(o.pruned); got != 7 {
		t.Errorf("pruned = %v, want 7", got)
	}
	if n := testutil.CollectAndCount(o.phase); n != 1 {
		t.Errorf("phase series = %d, want 1", n)
	}
	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP idemgen_events_total Idempotency engine events by operation and kind.
# TYPE idemgen_events_total counter
idemgen_events_total{event="ambiguous",operation="pay"} 0
idemgen_events_total{event="claim",operation="pay"} 1
idemgen_events_total{event="completer_failed",operation="pay"} 0
idemgen_events_total{event="completer_run",operation="pay"} 0
idemgen_events_total{event="fenced",operation="pay"} 0
idemgen_events_total{event="in_flight",operation="pay"} 0
idemgen_events_total{event="mismatch",operation="pay"} 0
idemgen_events_total{event="not_stored",operation="pay"} 0
idemgen_events_total{event="primary_changed",operation="pay"} 0
idemgen_events_total{event="release",operation="pay"} 0
idemgen_events_total{event="replay",operation="pay"} 2
idemgen_events_total{event="resume",operation="pay"} 0
idemgen_events_total{event="same_request_new_key",operation="pay"} 0
idemgen_events_total{event="takeover",operation="pay"} 0
idemgen_events_total{event="wait",operation="pay"} 0
`), "idemgen_events_total")
	if err != nil {
		t.Error(err)
	}
	// Waits by how they ended, takeovers by cause: every outcome and
	// cause at zero from the operation's first event.
	o.Observe(idem.Event{Kind: idem.EventWait, Operation: "pay", Cause: idem.WaitAnswered, Duration: 40 * time.Millisecond})
	o.Observe(idem.Event{Kind: idem.EventTakeover, Operation: "pay", Cause: idem.TakeoverExpired})
	if n := testutil.CollectAndCount(o.wait); n != 3 {
		t.Errorf("wait series = %d, want one per outcome (3)", n)
	}
	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP idemgen_takeovers_total Executions taken over from an owner whose lease ran out, by cause.
# TYPE idemgen_takeovers_total counter
idemgen_takeovers_total{cause="completer",operation="pay"} 0
idemgen_takeovers_total{cause="lease_expired",operation="pay"} 1
`), "idemgen_takeovers_total")
	if err != nil {
		t.Error(err)
	}
	if _, err := New(reg); err == nil {
		t.Error("registering twice succeeded")
	}
}

// TestSeriesBoundedByOperations: 100,000 requests, each under a key of its
// own, make no more series than the first one did: no metric is labelled
// by key or scope.
func TestSeriesBoundedByOperations(t *testing.T) {
	reg := prometheus.NewRegistry()
	o, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	request := func(i int) {
		op := []string{"pay", "refund"}[i%2]
		for _, ev := range []idem.Event{
			{Kind: idem.EventClaim, Operation: op, Retention: time.Hour},
			{Kind: idem.EventSameRequestNewKey, Operation: op},
			{Kind: idem.EventIntentAge, Operation: op, Age: time.Duration(i) * time.Second, Retention: time.Hour},
			{Kind: idem.EventPhase, Operation: op, Phase: "do", Duration: time.Millisecond},
			{Kind: idem.EventComplete, Operation: op},
			{Kind: idem.EventReplay, Operation: op, Age: time.Duration(i) * time.Millisecond, Retention: time.Hour, Status: 500 + i%2},
		} {
			o.Observe(ev)
		}
	}
	series := func() int {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range families {
			n += len(f.GetMetric())
		}
		return n
	}
	// Four requests make every series: both operations, within the
	// retention and past it.
	for _, i := range []int{0, 1, 7200, 7201} {
		request(i)
	}
	first := series()
	for i := range 100_000 {
		request(i)
	}
	if n := series(); n != first {
		t.Fatalf("%d series after 100,000 requests, %d after four", n, first)
	}
}
