package api_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/idemgen/idemgen/examples/stripelike/api"
	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
)

func TestMain(m *testing.M) { idemtest.Main(m) }

// service is the example API on a fresh schema, served over HTTP, with its
// card network.
type service struct {
	URL     string
	network *api.MemoryNetwork
	env     *idemtest.Env
}

func newService(t *testing.T) *service {
	env := idemtest.New(t, idem.Options{Logger: slog.New(slog.DiscardHandler), Contract: api.Contract()})
	if err := api.Migrate(context.Background(), env.Pool); err != nil {
		t.Fatal(err)
	}
	network := &api.MemoryNetwork{}
	h, err := api.NewHandler(env.Engine, network)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &service{URL: srv.URL, network: network, env: env}
}

// stripeClient is stripe-go's client of the API at url, retrying as
// configured, with stripe-go's own backoff between tries.
func stripeClient(url string, retries int64) *stripe.Client {
	be := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(url),
		MaxNetworkRetries: stripe.Int64(retries),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	}).(*stripe.BackendImplementation)
	return stripe.NewClient("sk_test_example", stripe.WithBackends(&stripe.Backends{API: be}))
}

func chargeParams(amount int64, key string) *stripe.ChargeCreateParams {
	p := &stripe.ChargeCreateParams{Amount: stripe.Int64(amount), Currency: stripe.String("usd")}
	if key != "" {
		p.SetIdempotencyKey(key)
	}
	return p
}

func (s *service) charges(t *testing.T) int {
	var n int
	if err := s.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM charges`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// stripeError is err as stripe-go parses an error response, with the
// type, code and status Stripe documents, a message and a request id.
func stripeError(t *testing.T, what string, err error, status int, typ stripe.ErrorType, code stripe.ErrorCode) *stripe.Error {
	t.Helper()
	var se *stripe.Error
	if !errors.As(err, &se) {
		t.Fatalf("%s: %v (%T); want a *stripe.Error", what, err, err)
	}
	if se.HTTPStatusCode != status || se.Type != typ || se.Code != code || se.Msg == "" || se.RequestID == "" {
		t.Errorf("%s: status %d, type %q, code %q, message %q, request id %q; want %d, %q, %q, a message and a request id",
			what, se.HTTPStatusCode, se.Type, se.Code, se.Msg, se.RequestID, status, typ, code)
	}
	return se
}

// TestStripeGo: the official Stripe client calls the API as it calls
// Stripe, and every answer is what it expects: objects with a request id
// and the key echoed, replays that name their original request, refusals
// that parse as *stripe.Error with the types and codes Stripe documents,
// keys in Stripe's grammar.
func TestStripeGo(t *testing.T) {
	s := newService(t)
	sc := stripeClient(s.URL, 2)
	ctx := context.Background()

	t.Run("a customer, with the key stripe-go makes", func(t *testing.T) {
		c, err := sc.V1Customers.Create(ctx, &stripe.CustomerCreateParams{Email: stripe.String("jenny@example.com")})
		if err != nil {
			t.Fatal(err)
		}
		r := c.LastResponse
		if c.ID == "" || c.Email != "jenny@example.com" || r.RequestID == "" || r.IdempotencyKey == "" {
			t.Errorf("customer %q %q, request id %q, key %q; want all set", c.ID, c.Email, r.RequestID, r.IdempotencyKey)
		}
	})

	t.Run("one key, one charge, the retry a replay naming the original", func(t *testing.T) {
		first, err := sc.V1Charges.Create(ctx, chargeParams(500, "order-1"))
		if err != nil {
			t.Fatal(err)
		}
		again, err := sc.V1Charges.Create(ctx, chargeParams(500, "order-1"))
		if err != nil {
			t.Fatal(err)
		}
		if again.ID != first.ID || !first.Paid || first.Status != stripe.ChargeStatusSucceeded {
			t.Errorf("charges %q and %q (%v, %s); want one, paid", first.ID, again.ID, first.Paid, first.Status)
		}
		h := again.LastResponse.Header
		if h.Get("Idempotent-Replayed") != "true" || h.Get("Original-Request") != first.LastResponse.RequestID ||
			again.LastResponse.RequestID == first.LastResponse.RequestID || again.LastResponse.IdempotencyKey != "order-1" {
			t.Errorf("the replay's headers %v; want Idempotent-Replayed, Original-Request %s, a request id of its own, the key", h, first.LastResponse.RequestID)
		}
		if n := s.network.Charges(); n != 1 {
			t.Errorf("%d charges at the network; want 1", n)
		}
	})

	t.Run("keys as Stripe takes them", func(t *testing.T) {
		ids := map[string]bool{}
		for _, key := range []string{"order 42", "commande-é", `"dup-7"`, "dup-7"} {
			ch, err := sc.V1Charges.Create(ctx, chargeParams(700, key))
			if err != nil {
				t.Fatalf("key %q: %v", key, err)
			}
			if ch.LastResponse.IdempotencyKey != key {
				t.Errorf("key %q echoed as %q", key, ch.LastResponse.IdempotencyKey)
			}
			ids[ch.ID] = true
		}
		if len(ids) != 4 {
			t.Errorf("%d charges for four keys; want four (\"dup-7\" and dup-7 are two keys)", len(ids))
		}
	})

	t.Run("a key reused with other parameters", func(t *testing.T) {
		_, err := sc.V1Charges.Create(ctx, chargeParams(999, "order-1"))
		stripeError(t, "a reused key", err, 400, stripe.ErrorTypeIdempotency, "")
		var ie *stripe.IdempotencyError
		if !errors.As(err, &ie) {
			t.Errorf("%v: stripe-go did not read it as an *stripe.IdempotencyError", err)
		}
	})

	t.Run("a key in flight past the wait budget ends in the charge", func(t *testing.T) {
		// The charge takes 2 s; the duplicate waits 1 s (Prefer: wait=1),
		// is answered 429 lock_timeout, and stripe-go retries it by its own
		// rules: its retry waits again and replays the charge.
		s.network.SetLatency(2 * time.Second)
		defer s.network.SetLatency(0)
		done := make(chan error)
		go func() {
			_, err := sc.V1Charges.Create(ctx, chargeParams(300, "slow-1"))
			done <- err
		}()
		waitFor(t, func() bool { return s.network.InFlight() == 1 }, "the slow charge to reach the network")
		p := chargeParams(300, "slow-1")
		p.Headers = http.Header{"Prefer": {"wait=1"}}
		ch, err := sc.V1Charges.Create(ctx, p)
		if err != nil || !ch.Paid || ch.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("the duplicate past its wait: %v, %+v; want the charge, replayed after stripe-go's own retry", err, ch)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
		// What stripe-go retried: 429 lock_timeout, Retry-After, Stripe-Should-Retry: true.
		s.network.SetLatency(time.Second)
		go func() {
			_, err := sc.V1Charges.Create(ctx, chargeParams(300, "slow-2"))
			done <- err
		}()
		waitFor(t, func() bool { return s.network.InFlight() == 1 }, "the slow charge to reach the network")
		p = chargeParams(300, "slow-2")
		p.Headers = http.Header{"Prefer": {"wait=0"}}
		_, err = stripeClient(s.URL, 0).V1Charges.Create(ctx, p)
		se := stripeError(t, "a key in flight, not retried", err, 429, stripe.ErrorTypeIdempotency, stripe.ErrorCodeLockTimeout)
		if h := se.LastResponse.Header; h.Get("Stripe-Should-Retry") != "true" || h.Get("Retry-After") == "" {
			t.Errorf("the 429's headers %v; want Retry-After and Stripe-Should-Retry: true", h)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	t.Run("a request without a secret key", func(t *testing.T) {
		_, err := stripe.NewClient("pk_test_publishable", stripe.WithBackends(&stripe.Backends{API: stripe.GetBackendWithConfig(stripe.APIBackend,
			&stripe.BackendConfig{URL: stripe.String(s.URL), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}})})).V1Charges.Create(ctx, chargeParams(100, "no-auth"))
		stripeError(t, "no secret key", err, 401, stripe.ErrorTypeInvalidRequest, "")
	})

	t.Run("a resumable failure ends in the charge through stripe-go's own retries", func(t *testing.T) {
		// The card network is down for one call, then back: the execution
		// fails after its claim, is answered 429 lock_timeout (api_error,
		// in words), and stripe-go's retry resumes it.
		s.network.SetFailures(1, errors.New("card network unreachable"))
		before := s.network.Charges()
		ch, err := sc.V1Charges.Create(ctx, chargeParams(400, "fails-1"))
		if err != nil || !ch.Paid {
			t.Fatalf("%v; want the charge, resumed by stripe-go's own retry", err)
		}
		if n := s.network.Charges() - before; n != 1 {
			t.Errorf("%d charges; want 1", n)
		}
		// Without retries, what stripe-go saw: a failure in words it retries.
		s.network.SetFailures(1, errors.New("card network unreachable"))
		_, err = stripeClient(s.URL, 0).V1Charges.Create(ctx, chargeParams(400, "fails-2"))
		if se := stripeError(t, "a resumable failure", err, 429, stripe.ErrorTypeAPI, stripe.ErrorCodeLockTimeout); !strings.Contains(se.Msg, "retry") {
			t.Errorf("the failure's message %q does not say to retry", se.Msg)
		}
	})
}

// TestStripeGoBehindARetryingProxy: a proxy that gives each try 700 ms and
// resends the POST (as HAProxy's retry-on all-retryable-errors does) while
// the card network takes 1.2 s. The resent request waits for the
// execution in flight and gets its charge: stripe-go sees success. With
// Prefer: wait=0 the resent request is answered 429 lock_timeout, which
// stripe-go retries by its own rules until the charge is there to replay:
// success too, and one charge.
func TestStripeGoBehindARetryingProxy(t *testing.T) {
	s := newService(t)
	s.network.SetLatency(1200 * time.Millisecond)
	proxy := retryingProxy(t, s.URL, 700*time.Millisecond, 3)
	sc := stripeClient(proxy.URL, 2)
	ch, err := sc.V1Charges.Create(context.Background(), chargeParams(100, "behind-proxy"))
	if err != nil || !ch.Paid {
		t.Fatalf("behind the proxy: %v; want the charge", err)
	}
	if n := s.network.Charges(); n != 1 {
		t.Errorf("%d charges; want 1", n)
	}

	p := chargeParams(100, "behind-proxy-nowait")
	p.Headers = http.Header{"Prefer": {"wait=0"}}
	ch, err = sc.V1Charges.Create(context.Background(), p)
	if err != nil || !ch.Paid {
		t.Fatalf("behind the proxy, without waiting: %v; want the charge after stripe-go's own retries", err)
	}
	if n := s.network.Charges(); n != 2 {
		t.Errorf("%d charges; want 2 (one per key)", n)
	}
}

// TestStripeGoEndsEveryIntentInItsCharge: 150 intents from 8 clients,
// the card network dropping 3% of calls before any effect; stripe-go with
// its default retries (2, with its own backoff) and no call by hand ends
// every intent in its charge, once: a dropped call's execution is
// answered 429 lock_timeout, which stripe-go retries, and the retry
// resumes it.
func TestStripeGoEndsEveryIntentInItsCharge(t *testing.T) {
	s := newService(t)
	s.network.SetFailureRate(0.03, errors.New("card network unreachable"))
	sc := stripe.NewClient("sk_test_example", stripe.WithBackends(&stripe.Backends{API: stripe.GetBackendWithConfig(stripe.APIBackend,
		&stripe.BackendConfig{URL: stripe.String(s.URL), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}})}))
	const intents, clients = 150, 8
	failed := make(chan error, intents)
	next := make(chan int, intents)
	for i := range intents {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if ch, err := sc.V1Charges.Create(context.Background(), chargeParams(100, fmt.Sprintf("intent-%d", i))); err != nil || !ch.Paid {
					failed <- fmt.Errorf("intent %d: %v", i, err)
				}
			}
		}()
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Error(err)
	}
	if n, c := s.network.Charges(), s.charges(t); n != intents || c != intents {
		t.Errorf("%d charges at the network, %d rows; want %d and %d", n, c, intents, intents)
	}
}

// TestStripeGoRetriesEndInOneCharge: a connection lost after the API
// answered makes stripe-go retry under the same key; the retry replays the
// charge.
func TestStripeGoRetriesEndInOneCharge(t *testing.T) {
	s := newService(t)
	var dropped atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, body := forward(t, r, s.URL, 0)
		if resp == nil {
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		if dropped.Add(1) <= 2 {
			// The answer is lost on its way back: the connection closes.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		copyResponse(w, resp, body)
	}))
	t.Cleanup(proxy.Close)
	sc := stripeClient(proxy.URL, 3)
	ch, err := sc.V1Charges.Create(context.Background(), chargeParams(250, "lost-answer"))
	if err != nil || !ch.Paid {
		t.Fatalf("%v; want the charge after stripe-go's retries", err)
	}
	if ch.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the answer that reached stripe-go is not the replay: %v", ch.LastResponse.Header)
	}
	if n, c := s.network.Charges(), s.charges(t); n != 1 || c != 1 {
		t.Errorf("%d charges at the network, %d rows; want 1 and 1", n, c)
	}
}

// retryingProxy resends each request to target up to tries times, each
// try cut at perTry, and answers 504 when none answered in time.
func retryingProxy(t *testing.T, target string, perTry time.Duration, tries int) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		for range tries {
			r.Body = io.NopCloser(bytes.NewReader(body))
			if resp, b := forward(t, r, target, perTry); resp != nil {
				copyResponse(w, resp, b)
				return
			}
		}
		http.Error(w, "gateway timeout", http.StatusGatewayTimeout)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// forward sends r to target within timeout (0: none) and returns the
// response with its body read, or nil when the try failed.
func forward(t *testing.T, r *http.Request, target string, timeout time.Duration) (*http.Response, []byte) {
	ctx, cancel := context.WithCancel(r.Context())
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(r.Context(), timeout)
	}
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, target+r.URL.RequestURI(), r.Body)
	if err != nil {
		t.Error(err)
		return nil, nil
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil
	}
	return resp, body
}

func copyResponse(w http.ResponseWriter, resp *http.Response, body []byte) {
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
