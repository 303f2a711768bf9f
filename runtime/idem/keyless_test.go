package idem_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

type clientSet struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *clientSet) Observe(ev idem.Event) {
	if ev.Kind == idem.EventKeyless {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.n[ev.Cause]++
	}
}

// TestKeylessClientsAreBounded: the clients EventKeyless names are the
// User-Agents' products, at most MaxKeylessClients of them; any further
// client is "other", so that a metric's labels stay few.
func TestKeylessClientsAreBounded(t *testing.T) {
	for ua, want := range map[string]string{"checkout-web/2.1 (x)": "checkout-web", "": "unknown", "Mozilla/5.0 (X11)": "Mozilla", "a b": "a", "é/1": "__"} {
		if got := idemhttp.KeylessClient(ua); got != want {
			t.Errorf("KeylessClient(%q) = %q; want %q", ua, got, want)
		}
	}
	e := newEnv(t)
	seen := &clientSet{n: map[string]int{}}
	eng := mustEngineWith(t, e, idem.Options{Observer: seen})
	for i := range idem.MaxKeylessClients + 10 {
		eng.Keyless(context.Background(), payOp, idemhttp.KeylessClient(fmt.Sprintf("client-%d/1.0", i)))
		eng.Keyless(context.Background(), payOp, idemhttp.KeylessClient("client-0/2.0"))
	}
	if len(seen.n) != idem.MaxKeylessClients+1 || seen.n["other"] != 10 || seen.n["client-0"] != idem.MaxKeylessClients+11 {
		t.Errorf("%d clients, other %d, client-0 %d; want %d, 10 and %d", len(seen.n), seen.n["other"], seen.n["client-0"], idem.MaxKeylessClients+1, idem.MaxKeylessClients+11)
	}
}
