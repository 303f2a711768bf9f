package cardnet

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemsig"
)

func TestIdempotentCharges(t *testing.T) {
	n := New(Options{})
	srv := httptest.NewServer(n)
	defer srv.Close()
	c := &Client{URL: srv.URL}
	ctx := context.Background()
	req := Request{Amount: 100, Currency: "EUR", Customer: "a@example.com"}
	a, err := c.Charge(ctx, "k1", req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Charge(ctx, "k1", req)
	if err != nil || b != a {
		t.Fatalf("same key: %+v, %v; want %+v", b, err, a)
	}
	if _, err := c.Charge(ctx, "k1", Request{Amount: 200, Currency: "EUR"}); err == nil {
		t.Fatal("same key, other charge: accepted")
	}
	if _, err := c.Charge(ctx, "k2", Request{Amount: DeclinedAmount, Currency: "EUR"}); !errors.Is(err, ErrDeclined) {
		t.Fatalf("declined amount: %v", err)
	}
	n.SetOptions(Options{FailAfter: 1})
	if _, err := c.Charge(ctx, "k3", req); err == nil {
		t.Fatal("FailAfter=1 answered success")
	}
	n.SetOptions(Options{})
	if _, err := c.Charge(ctx, "k3", req); err != nil {
		t.Fatal(err)
	}
	ok := 0
	for _, ch := range n.Charges() {
		if ch.Status == "succeeded" {
			ok++
		}
	}
	if ok != 2 || n.Posts() != 6 {
		t.Fatalf("%d charges, %d posts; want 2 and 6", ok, n.Posts())
	}
}

// TestWebhooksAtLeastOnce: every successful charge is announced with a
// signed charge.succeeded event, retried until a 2xx, delivered a second
// time when the duplicate share says so, and followed by charge.refunded
// for the refund share; a declined charge is not announced.
func TestWebhooksAtLeastOnce(t *testing.T) {
	secret := []byte("whsec_test")
	verifier := &idemsig.HMAC{Header: SignatureHeader, Secrets: []idemsig.Secret{{Sender: "cardnet", Key: secret}}}
	var mu sync.Mutex
	got := map[string]int{} // event id -> 2xx answers
	posts := 0
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if _, err := verifier.Verify(r, body); err != nil {
			t.Errorf("delivery: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var ev Event
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("delivery body %s: %v", body, err)
		}
		mu.Lock()
		defer mu.Unlock()
		posts++
		if posts%2 == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // every other attempt fails: retried
			return
		}
		got[ev.ID]++
		if got[ev.ID] > 1 {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer receiver.Close()
	n := New(Options{})
	n.SetWebhooks(Webhooks{URL: receiver.URL, Secret: secret, DuplicateShare: 1, RefundShare: 1, MinWait: 5 * time.Millisecond, MaxWait: 20 * time.Millisecond})
	defer n.Close()
	srv := httptest.NewServer(n)
	defer srv.Close()
	c := &Client{URL: srv.URL}
	ch, err := c.Charge(context.Background(), "k1", Request{Amount: 100, Currency: "EUR", Customer: "a@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Charge(context.Background(), "k2", Request{Amount: DeclinedAmount, Currency: "EUR"}); !errors.Is(err, ErrDeclined) {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var events []EventStatus
	for {
		events = n.Events()
		if len(events) == 2 && events[0].Done && events[1].Done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events not delivered: %+v", events)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, want := range []string{EventChargeSucceeded, EventChargeRefunded} {
		ev := events[i]
		if ev.Event.Type != want || ev.Event.Charge.ID != ch.ID || !strings.HasPrefix(ev.Event.ID, "evt_") || !ev.Delivered || !ev.Duplicate {
			t.Fatalf("event %d: %+v; want %s of %s, delivered twice", i, ev, want, ch.ID)
		}
		var ok, dupOK, failed int
		for _, d := range ev.Deliveries {
			switch {
			case d.Status == 200 && d.Duplicate && d.Replayed:
				dupOK++
			case d.Status == 200 && !d.Duplicate:
				ok++
			case d.Status == 503:
				failed++
			}
		}
		if ok != 1 || dupOK != 1 || failed != 2 {
			t.Fatalf("event %d deliveries %+v; want a 503 then a 200, twice (the second replayed)", i, ev.Deliveries)
		}
	}
}

// TestClientLists: the client's Charges lists the successful charges only,
// and Events the events the network made, as GET /charges and GET /events
// serve them.
func TestClientLists(t *testing.T) {
	n := New(Options{})
	srv := httptest.NewServer(n)
	defer srv.Close()
	c := &Client{URL: srv.URL}
	ctx := context.Background()
	if _, err := c.Charge(ctx, "k1", Request{Amount: 100, Currency: "EUR", Customer: "a@example.com"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Charge(ctx, "k2", Request{Amount: DeclinedAmount, Currency: "EUR", Customer: "b@example.com"}); !errors.Is(err, ErrDeclined) {
		t.Fatal(err)
	}
	charges, err := c.Charges(ctx)
	if err != nil || len(charges) != 1 || charges[0].Customer != "a@example.com" {
		t.Fatalf("charges %+v, %v; want a@example.com's only", charges, err)
	}
	if events, err := c.Events(ctx); err != nil || len(events) != len(n.Events()) {
		t.Fatalf("events %+v, %v; want %d", events, err, len(n.Events()))
	}
	if _, err := (&Client{URL: srv.URL + "/nowhere"}).Charges(ctx); err == nil {
		t.Fatal("a 404 listing was accepted")
	}
}
