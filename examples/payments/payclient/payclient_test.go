package payclient_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/examples/payments/cardnet"
	"github.com/idemgen/idemgen/examples/payments/payclient"
	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/internal/testshort"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/idemsig"
)

func TestMain(m *testing.M) { idemtest.Main(m) }

// service is the payments example in-process, on PostgreSQL, with the fake
// card network; every instance (a restart makes a new one) shares them.
type service struct {
	t       *testing.T
	pool    *pgxpool.Pool
	schema  string
	cards   *cardnet.Network
	cardURL string
}

func newService(t *testing.T) *service {
	t.Helper()
	env := idemtest.New(t, idem.Options{}) // each handler makes an engine of its own
	pool, schema := env.Pool, env.Schema
	ctx := context.Background()
	if err := api.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	s := &service{t: t, pool: pool, schema: schema, cards: cardnet.New(cardnet.Options{})}
	cards := httptest.NewServer(s.cards)
	t.Cleanup(cards.Close)
	s.cardURL = cards.URL
	return s
}

// handler starts one instance of the service: a new engine and echo
// server, as a process start would.
func (s *service) handler() http.Handler {
	s.t.Helper()
	eng, err := idem.New(s.pool, idem.Options{Schema: s.schema})
	if err != nil {
		s.t.Fatal(err)
	}
	e, err := api.NewServer(api.ServerConfig{Pool: s.pool, Engine: eng, CardURL: s.cardURL, WebhookSecret: []byte("whsec_test")})
	if err != nil {
		s.t.Fatal(err)
	}
	return e
}

// payments counts the customer's payment rows.
func (s *service) payments(customer string) int {
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM payments WHERE customer = $1`, customer).Scan(&n); err != nil {
		s.t.Fatal(err)
	}
	return n
}

// charges counts the customer's charges at the card network.
func (s *service) charges(customer string) int {
	n := 0
	for _, c := range s.cards.Charges() {
		if c.Customer == customer {
			n++
		}
	}
	return n
}

// client returns the generated client for the service at url, as account
// acct, with a fresh connection per attempt (so that net/http's own
// transparent retry of a request on a reused connection does not hide
// attempts from the counts) and attempts logged.
func client(t *testing.T, url string, onAttempt func(idemclient.Attempt)) *payclient.IdempotentClient {
	t.Helper()
	p := idemclient.Policy{MinWait: 50 * time.Millisecond, MaxWait: 500 * time.Millisecond, MaxAttempts: 50,
		OnAttempt: func(a idemclient.Attempt) {
			t.Logf("attempt %d: status %d err %v -> retry %t after %v (%s)", a.N, a.Status, a.Err, a.Retry, a.Wait.Round(time.Millisecond), a.Reason)
			if onAttempt != nil {
				onAttempt(a)
			}
		}}
	c, err := payclient.NewIdempotentClient(url, p,
		payclient.WithHTTPClient(&http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}),
		payclient.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer acct_client")
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func payment(customer string, amount int64) payclient.NewPayment {
	ts := time.Now().Format(time.RFC3339Nano)
	return payclient.NewPayment{Amount: amount, Currency: "EUR", Customer: customer, ClientTs: &ts}
}

// dropper passes requests to the service, but answers none of the first
// `drop` ones: the service executes them, then the connection is closed
// before the response leaves, as when a network path fails after commit.
type dropper struct {
	next    http.Handler
	drop    atomic.Int32
	dropped atomic.Int32
}

func (d *dropper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.drop.Add(-1) < 0 {
		d.next.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	d.next.ServeHTTP(rec, r)
	d.dropped.Add(1)
	if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
		conn.Close()
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// A create whose response is lost after the service committed it is
// retried with the same key and gets the stored answer; the card is
// charged once.
func TestDroppedResponseRetriedGetsTheStoredAnswer(t *testing.T) {
	s := newService(t)
	d := &dropper{next: s.handler()}
	d.drop.Store(1)
	srv := httptest.NewServer(d)
	defer srv.Close()

	resp, res, err := client(t, srv.URL, nil).CreatePayment(ctxFor(t), "", payment("dropped@example.com", 1200))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("answer %d after %d attempts, replayed %t, key %s; body %s", resp.StatusCode(), res.Attempts, res.Replayed, res.Key, resp.Body)
	if d.dropped.Load() != 1 || resp.StatusCode() != 201 || resp.JSON201 == nil || res.Attempts != 2 || !res.Replayed {
		t.Fatalf("want the stored 201 on the second attempt after one dropped response; got %d, %+v, dropped %d", resp.StatusCode(), res, d.dropped.Load())
	}
	if p, c := s.payments("dropped@example.com"), s.charges("dropped@example.com"); p != 1 || c != 1 {
		t.Fatalf("%d payment rows and %d card charges; want 1 and 1", p, c)
	}
	t.Logf("one payment row, one card charge (%s)", resp.JSON201.Status)
}

// A second call with the key of a payment still at the card network
// waits on the server for the first and is answered with its response,
// replayed, in one attempt.
func TestInFlightDuplicateWaitsForTheAnswer(t *testing.T) {
	testshort.Long(t)
	s := newService(t)
	srv := httptest.NewServer(s.handler())
	defer srv.Close()
	charging := make(chan struct{})
	var once sync.Once
	s.cards.SetOptions(cardnet.Options{Latency: 1500 * time.Millisecond, OnCharge: func(cardnet.Charge) { once.Do(func() { close(charging) }) }})

	key := idemclient.NewKey()
	body := payment("waits@example.com", 2500)
	var first *payclient.CreatePaymentResponse
	var firstErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		first, _, firstErr = client(t, srv.URL, nil).CreatePayment(ctxFor(t), key, body)
	}()
	<-charging
	second, res, err := client(t, srv.URL, nil).CreatePayment(ctxFor(t), key, body)
	<-done
	if err != nil || firstErr != nil {
		t.Fatal(err, firstErr)
	}
	if second.StatusCode() != 201 || !res.Replayed || res.Attempts != 1 || string(second.Body) != string(first.Body) {
		t.Fatalf("second call: %d replayed %t after %d attempts, body %s; want the first call's 201 (%s), replayed, in one attempt",
			second.StatusCode(), res.Replayed, res.Attempts, second.Body, first.Body)
	}
	if p, c := s.payments("waits@example.com"), s.charges("waits@example.com"); p != 1 || c != 1 {
		t.Fatalf("%d payment rows and %d card charges; want 1 and 1", p, c)
	}
}

// A second call that will not wait (Prefer: wait=0) with the key of a
// payment still at the card network gets 409 with Retry-After, waits that
// long, and ends in the replay of the first call's answer.
func TestInFlightRetriedAfterRetryAfterEndsInTheReplay(t *testing.T) {
	testshort.Long(t)
	s := newService(t)
	srv := httptest.NewServer(s.handler())
	defer srv.Close()
	charging := make(chan struct{})
	var once sync.Once
	s.cards.SetOptions(cardnet.Options{Latency: 1500 * time.Millisecond, OnCharge: func(cardnet.Charge) { once.Do(func() { close(charging) }) }})

	key := idemclient.NewKey()
	body := payment("inflight@example.com", 2500)
	var first *payclient.CreatePaymentResponse
	var firstErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		first, _, firstErr = client(t, srv.URL, nil).CreatePayment(ctxFor(t), key, body)
	}()
	<-charging

	var attempts []idemclient.Attempt
	var at []time.Time
	second, res, err := client(t, srv.URL, func(a idemclient.Attempt) {
		attempts, at = append(attempts, a), append(at, time.Now())
	}).CreatePayment(ctxFor(t), key, body, idemclient.PreferWait(0))
	<-done
	if err != nil || firstErr != nil {
		t.Fatal(err, firstErr)
	}
	if len(attempts) < 2 || attempts[0].Status != 409 || attempts[0].Header.Get("Retry-After") == "" {
		t.Fatalf("the second call's first attempt should be 409 with Retry-After: %+v", attempts)
	}
	retryAfter := attempts[0].Wait
	t.Logf("first attempt: 409, Retry-After %s; waited %v", attempts[0].Header.Get("Retry-After"), at[1].Sub(at[0]).Round(time.Millisecond))
	if gap := at[1].Sub(at[0]); gap < retryAfter {
		t.Errorf("retried after %v; Retry-After asked for %v", gap, retryAfter)
	}
	if second.StatusCode() != 201 || !res.Replayed || string(second.Body) != string(first.Body) {
		t.Fatalf("second call: %d replayed %t body %s; want the first call's 201 (%s), replayed", second.StatusCode(), res.Replayed, second.Body, first.Body)
	}
	if p, c := s.payments("inflight@example.com"), s.charges("inflight@example.com"); p != 1 || c != 1 {
		t.Fatalf("%d payment rows and %d card charges; want 1 and 1", p, c)
	}
	t.Logf("second call: %d attempts, replayed %t, same body as the first; one payment, one charge", res.Attempts, res.Replayed)
}

// The key reused for another request is 422 at once, and a declined card
// (402, a stored business answer) is not retried either.
func TestAnswersAreReturnedAtOnce(t *testing.T) {
	s := newService(t)
	srv := httptest.NewServer(s.handler())
	defer srv.Close()
	c := client(t, srv.URL, nil)
	ctx := ctxFor(t)

	key := idemclient.NewKey()
	if resp, _, err := c.CreatePayment(ctx, key, payment("reuse@example.com", 1000)); err != nil || resp.StatusCode() != 201 {
		t.Fatalf("first payment: %v %v", resp, err)
	}
	start := time.Now()
	resp, res, err := c.CreatePayment(ctx, key, payment("reuse@example.com", 2000))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("same key, another amount: %d after %d attempt(s) in %v: %s", resp.StatusCode(), res.Attempts, time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(resp.Body)))
	if resp.StatusCode() != 422 || res.Attempts != 1 || res.Replayed || time.Since(start) > 2*time.Second {
		t.Fatalf("want 422 after one attempt; got %d, %+v", resp.StatusCode(), res)
	}

	declined, res, err := c.CreatePayment(ctx, "", payment("declined@example.com", cardnet.DeclinedAmount))
	if err != nil || declined.StatusCode() != 402 || res.Attempts != 1 || res.Replayed {
		t.Fatalf("declined: %v %+v %v; want 402 after one attempt", declined, res, err)
	}
	again, res2, err := c.CreatePayment(ctx, res.Key, payment("declined@example.com", cardnet.DeclinedAmount))
	if err != nil || again.StatusCode() != 402 || res2.Attempts != 1 || !res2.Replayed || string(again.Body) != string(declined.Body) {
		t.Fatalf("declined again: %v %+v %v; want the stored 402, replayed, after one attempt", again, res2, err)
	}
	t.Logf("402 declined after %d attempt; asked again with its key: 402 replayed after %d attempt", res.Attempts, res2.Attempts)
}

// While the service restarts nothing listens: the create is refused,
// retried, and made once the new instance is up.
func TestConnectionRefusedDuringRestartIsRetried(t *testing.T) {
	testshort.Long(t)
	s := newService(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	before := &http.Server{Handler: s.handler()}
	go before.Serve(ln)
	c := client(t, "http://"+addr, nil)
	ctx := ctxFor(t)
	if resp, _, err := c.CreatePayment(ctx, "", payment("before@example.com", 900)); err != nil || resp.StatusCode() != 201 {
		t.Fatalf("before the restart: %v %v", resp, err)
	}
	before.Close() // the process is gone

	after := &http.Server{Handler: s.handler()}
	up := make(chan struct{})
	go func() {
		time.Sleep(700 * time.Millisecond)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listening again on %s: %v", addr, err)
			return
		}
		close(up)
		after.Serve(ln)
	}()
	defer after.Close()

	refused := 0
	resp, res, err := client(t, "http://"+addr, func(a idemclient.Attempt) {
		if a.Err != nil && strings.Contains(a.Err.Error(), "connection refused") {
			refused++
		}
	}).CreatePayment(ctx, "", payment("restart@example.com", 1300))
	if err != nil {
		t.Fatal(err)
	}
	<-up
	t.Logf("answer %d after %d attempts, %d refused", resp.StatusCode(), res.Attempts, refused)
	if resp.StatusCode() != 201 || refused == 0 || res.Attempts != refused+1 {
		t.Fatalf("want 201 after refused attempts; got %d, %+v, %d refused", resp.StatusCode(), res, refused)
	}
	if p, c := s.payments("restart@example.com"), s.charges("restart@example.com"); p != 1 || c != 1 {
		t.Fatalf("%d payment rows and %d card charges; want 1 and 1", p, c)
	}
}

// TestBodyKeyedOperation: the generated method of POST /webhooks/cardnet,
// keyed by the event's /id, takes no key, reads it from the body, and has
// the policy retry the POST: a delivery sent before its charge is known is
// answered 503 until the payment exists, then applied, and sending it again
// is a replay.
func TestBodyKeyedOperation(t *testing.T) {
	s := newService(t)
	srv := httptest.NewServer(s.handler())
	defer srv.Close()
	sign := func(_ context.Context, req *http.Request) error {
		body, err := req.GetBody()
		if err != nil {
			return err
		}
		defer body.Close()
		b, err := io.ReadAll(body)
		req.Header.Set(cardnet.SignatureHeader, idemsig.Sign(time.Now(), b, []byte("whsec_test")))
		return err
	}
	event := payclient.CardEvent{Id: "evt_client_1", Type: payclient.ChargeSucceeded, Created: time.Now().Unix(),
		Charge: payclient.CardCharge{Id: "ch_1", Amount: 1000, Currency: "EUR", Account: "acct_client"}}
	var statuses []int
	var mu sync.Mutex
	c := client(t, srv.URL, func(a idemclient.Attempt) { mu.Lock(); statuses = append(statuses, a.Status); mu.Unlock() })
	type result struct {
		resp *payclient.ReceiveCardnetEventResponse
		res  idemclient.Result
		err  error
	}
	done := make(chan result)
	go func() {
		resp, res, err := c.ReceiveCardnetEvent(context.Background(), event, sign)
		done <- result{resp, res, err}
	}()
	time.Sleep(300 * time.Millisecond) // the delivery is refused (503) and retried meanwhile
	if resp, _, err := c.CreatePayment(context.Background(), "", payclient.NewPayment{Amount: 1000, Currency: "EUR", Customer: "hook@example.com"}); err != nil || resp.StatusCode() != 201 {
		t.Fatalf("payment: %v %v", resp, err)
	}
	first := <-done
	if first.err != nil || first.resp.StatusCode() != 200 || first.res.Key != "evt_client_1" || first.res.Attempts < 2 || first.res.Replayed {
		t.Fatalf("delivery: %v, %+v (statuses %v); want 200 after retries, key evt_client_1", first.err, first.res, statuses)
	}
	again, res, err := c.ReceiveCardnetEvent(context.Background(), event, sign)
	if err != nil || again.StatusCode() != 200 || !res.Replayed || string(again.Body) != string(first.resp.Body) || res.Key != "evt_client_1" {
		t.Fatalf("second delivery: %v, %+v; want the first answer, replayed", err, res)
	}
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM card_events WHERE event_id = 'evt_client_1'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("evt_client_1 applied %d times (%v); want 1", n, err)
	}
}

// TestShippingWriteWhoseAnswerWasLost: the generated method of PUT
// /orders/{id}/shipping, a conditional write (If-Match) on the service's
// ETags. Its first attempt changes the address and its answer is lost; the
// retry, under the same If-Match, gets 412, and the method reads the
// address back: it holds what was sent, so the call is Confirmed. A write
// based on that older ETag later, with another address, gets 412 at once
// and is not: the newer address stays.
func TestShippingWriteWhoseAnswerWasLost(t *testing.T) {
	s := newService(t)
	d := &dropper{next: s.handler()}
	srv := httptest.NewServer(d)
	defer srv.Close()
	c, ctx := client(t, srv.URL, nil), ctxFor(t)
	if resp, err := c.PutOrder(ctx, "o-lost", &payclient.PutOrderParams{IfNoneMatch: payclient.Asterisk}, payclient.NewOrder{Item: "book"}); err != nil || resp.StatusCode() != 201 {
		t.Fatalf("creating the order: %v %v", resp, err)
	}
	read, err := c.GetOrderShipping(ctx, "o-lost")
	if err != nil || read.StatusCode() != 200 || read.HTTPResponse.Header.Get("ETag") == "" {
		t.Fatalf("reading the address: %v %v", read, err)
	}
	etag := read.HTTPResponse.Header.Get("ETag")
	d.drop.Store(1)
	resp, res, err := c.PutOrderShipping(ctx, "o-lost", &payclient.PutOrderShippingParams{IfMatch: etag}, payclient.Shipping{Address: "12 Oak Street"})
	if err != nil || d.dropped.Load() != 1 || resp.StatusCode() != 412 || res.Attempts != 2 || !res.Confirmed {
		t.Fatalf("the write whose answer was lost: %v, %+v, %v (dropped %d); want 412 on the retry, Confirmed", resp, res, err, d.dropped.Load())
	}
	resp, res, err = c.PutOrderShipping(ctx, "o-lost", &payclient.PutOrderShippingParams{IfMatch: etag}, payclient.Shipping{Address: "1 Old Road"})
	if err != nil || resp.StatusCode() != 412 || res.Attempts != 1 || res.Confirmed {
		t.Fatalf("a write based on the older ETag: %v, %+v, %v; want 412, not Confirmed", resp, res, err)
	}
	if now, err := c.GetOrderShipping(ctx, "o-lost"); err != nil || now.JSON200 == nil || now.JSON200.Address != "12 Oak Street" {
		t.Fatalf("the address: %v %v; want 12 Oak Street", now, err)
	}
}
