package idem_test

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
)

type ctxKey struct{}

// ctxObserver records the value under ctxKey of each event's context.
type ctxObserver struct{ seen []any }

func (o *ctxObserver) Observe(idem.Event) { o.seen = append(o.seen, "no context") }
func (o *ctxObserver) ObserveContext(ctx context.Context, _ idem.Event) {
	o.seen = append(o.seen, ctx.Value(ctxKey{}))
}

// TestObserversPassTheContext: idem.Observers gives each event to every
// observer, with its context to a ContextObserver, and the engine reports
// its events with the request's context.
func TestObserversPassTheContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	co, plain := &ctxObserver{}, &events{n: map[idem.EventKind]int{}}
	eng, err := idem.New(e.pool, idem.Options{Schema: e.schema, Observer: idem.Observers(plain, co)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(context.Background(), ctxKey{}, "request-1")
	// A key that does not look weak: a weak one adds its event.
	const key = "context-observer-key-0001"
	if _, err := idem.Run(ctx, eng, payOp, request("tenant", key, "body"), twoPhases(key)); err != nil {
		t.Fatal(err)
	}
	if plain.count(idem.EventClaim) != 1 || plain.count(idem.EventComplete) != 1 {
		t.Errorf("the plain observer missed events: %v", plain.n)
	}
	// claim, phase, phase, complete
	if len(co.seen) != 4 {
		t.Fatalf("the context observer saw %d events, want 4: %v", len(co.seen), co.seen)
	}
	for i, v := range co.seen {
		if v != "request-1" {
			t.Errorf("event %d came with context value %v, want the request's", i, v)
		}
	}
}
