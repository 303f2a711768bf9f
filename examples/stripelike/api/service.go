package api

import (
	"context"
	"crypto/rand"
	_ "embed"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstd"
)

//go:embed schema.sql
var schemaSQL string

// Migrate creates the service's tables (customers, charges) in the pool's
// search_path; the engine's are idemmigrate's.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, schemaSQL)
	return err
}

// Network is the card network a charge is authorized at: another system,
// which deduplicates by the key it is sent.
type Network interface {
	Authorize(ctx context.Context, key string, amount int64, currency string) (paid bool, err error)
}

// NewHandler serves the API on engine, which must have been made with
// Contract's options (Stripe's refusals and headers): the customers and
// charges of the bearer's secret key, each the principal its keys are
// scoped to.
func NewHandler(engine *idem.Engine, network Network) (http.Handler, error) {
	rt := &idemstd.Runtime{Engine: engine, Principal: secretKey}
	return Register(nil, nil, Phases{PostCustomers: &PostCustomersImpl{}, PostCharges: &PostChargesImpl{Network: network}}, rt)
}

// secretKey is the request's principal: its bearer's secret key, as Stripe
// authenticates (this example checks no more than its form). A request
// without one has no principal: the engine refuses it, 401 in Stripe's
// error object.
func secretKey(r *http.Request) (string, error) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || !strings.HasPrefix(key, "sk_") {
		return "", nil
	}
	return key, nil
}

// MemoryNetwork is a card network in memory, for tests and the demo: it
// authorizes every amount, once per key, after its latency, or fails every
// call while it is set to.
type MemoryNetwork struct {
	mu       sync.Mutex
	latency  time.Duration
	fail     error
	failures int     // calls left to fail with fail; 0: every call while fail is set
	rate     float64 // the share of calls that fail with rateErr
	rateErr  error
	inFlight int
	charged  map[string]bool
}

// SetLatency makes every call take d.
func (n *MemoryNetwork) SetLatency(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.latency = d
}

// SetFailure makes every call fail with err, until it is set to nil.
func (n *MemoryNetwork) SetFailure(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fail, n.failures = err, 0
}

// SetFailureRate makes each call fail with err with probability rate,
// before any effect: a network that drops some calls (0 stops it).
func (n *MemoryNetwork) SetFailureRate(rate float64, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rate, n.rateErr = rate, err
}

// SetFailures makes the next count calls fail with err: a network down,
// then back.
func (n *MemoryNetwork) SetFailures(count int, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fail, n.failures = err, count
}

// Authorize charges amount under key, once whatever the calls.
func (n *MemoryNetwork) Authorize(ctx context.Context, key string, amount int64, currency string) (bool, error) {
	n.mu.Lock()
	latency, fail := n.latency, n.fail
	if fail == nil && n.rate > 0 && mrand.Float64() < n.rate {
		fail = n.rateErr
	}
	if n.failures > 0 {
		if n.failures--; n.failures == 0 {
			n.fail = nil
		}
	}
	n.inFlight++
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.inFlight--
		n.mu.Unlock()
	}()
	select {
	case <-time.After(latency):
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if fail != nil {
		return false, fail
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.charged == nil {
		n.charged = map[string]bool{}
	}
	n.charged[key] = true
	return true, nil
}

// Charges is how many charges the network made: one per key.
func (n *MemoryNetwork) Charges() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.charged)
}

// InFlight is how many calls are in progress.
func (n *MemoryNetwork) InFlight() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.inFlight
}

// errInvalid is a request the service refuses: a 400, as Stripe's
// invalid_request_error names the parameter.
func errInvalid(param, msg string) error { return fmt.Errorf("%s: %s", param, msg) }

// newID is a new object id with prefix, as Stripe's look.
func newID(prefix string) string { return prefix + rand.Text()[:14] }
