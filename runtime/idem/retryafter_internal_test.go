package idem

import (
	"testing"
	"time"
)

// TestRetryAfterFollowsTheDurations: a duplicate is told to come back
// after the operation's typical execution time, in whole seconds, at least
// a second and at most the lease left; before any execution completed, the
// lease left.
func TestRetryAfterFollowsTheDurations(t *testing.T) {
	e := &Engine{}
	op := &Operation{ID: "op"}
	if got := e.retryAfter(op, 10*time.Second); got != 10*time.Second {
		t.Errorf("with no history: %v; want the lease left, 10s", got)
	}
	e.durations.observe("op", 3*time.Second)
	if got := e.retryAfter(op, 10*time.Second); got != 3*time.Second {
		t.Errorf("after a 3s execution: %v; want 3s", got)
	}
	if got := e.retryAfter(op, 2*time.Second); got != 2*time.Second {
		t.Errorf("with 2s of lease left: %v; want 2s", got)
	}
	for range 20 {
		e.durations.observe("op", 100*time.Millisecond)
	}
	if got := e.retryAfter(op, 10*time.Second); got != MinRetryAfter {
		t.Errorf("after fast executions: %v; want the floor, %v", got, MinRetryAfter)
	}
	e.durations.observe("other", time.Minute)
	if got := e.retryAfter(&Operation{ID: "other"}, 30*time.Second); got != 30*time.Second {
		t.Errorf("an operation slower than its lease: %v; want the lease left", got)
	}
	// The mean moves a quarter of the way to each new execution.
	var d durations
	d.observe("x", 4*time.Second)
	d.observe("x", 8*time.Second)
	if got, _ := d.typical("x"); got != 5*time.Second {
		t.Errorf("mean of 4s then 8s: %v; want 5s", got)
	}
}
