// Package cardnet is a fake card network for the payments example. It
// honours its own Idempotency-Key (the payments service sends the key idemgen
// derives for its charge_card phase), can be slowed down or made to fail, and
// lists every charge it made at GET /charges, so anyone can count them.
//
//	POST /charges  {"amount": 1000, "currency": "EUR", "customer": "a@example.com"}
//	               Idempotency-Key required. 201 {"id": "ch_1", ...}, or 402 when
//	               amount is 402 (declined). The same key again returns the same
//	               answer; the same key with another body is 422.
//	GET  /charges  {"charges": [...], "count": N}: every successful charge, once.
//	GET  /events   {"events": [...], "count": N}: every webhook event and its deliveries.
//
// Once SetWebhooks names a URL, the network tells it about its charges as
// real networks do: a signed charge.succeeded event for every successful
// charge, and charge.refunded for a share of them, each delivered at least
// once: retried with backoff until a 2xx, and sometimes delivered twice on
// purpose (see Webhooks).
package cardnet

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// DeclinedAmount is the amount the network always declines.
const DeclinedAmount = 402

// Charge is one charge the network made (or declined).
type Charge struct {
	ID       string `json:"id"`
	Key      string `json:"key"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Customer string `json:"customer"`
	Status   string `json:"status"` // succeeded | declined
	// Account is the merchant's account the charge was made for, as the
	// request said: echoed in the charge's events, so that a service laid
	// out by account finds the charge's payment on its account's shard.
	Account string `json:"account,omitempty"`
}

// Request is the body of POST /charges.
type Request struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Customer string `json:"customer"`
	Account  string `json:"account,omitempty"` // echoed in the charge and its events
}

// Options shape the network's behaviour.
type Options struct {
	Latency time.Duration // added to every POST, before answering
	// FailBefore is the probability (0..1) of answering 503 without charging.
	FailBefore float64
	// FailAfter is the probability of charging and then answering 503: the
	// caller cannot know the charge happened (the ambiguous case).
	FailAfter float64
	// OnCharge, if set, is called after a new charge is recorded and before
	// the answer is sent.
	OnCharge func(Charge)
	// OnRequest, if set, is called with every well-formed POST /charges
	// request, first or repeated, before anything else: a test's
	// idemtest.Recorder sees what each attempt sent under its key.
	OnRequest func(key string, req Request)
}

// Network is the fake card network. It is an http.Handler.
type Network struct {
	mu      sync.Mutex
	opts    Options
	byKey   map[string]entry
	charges []Charge
	posts   int
	hooks   webhooks
}

type entry struct {
	req    Request
	charge Charge
}

// New returns a network with opts.
func New(opts Options) *Network {
	return &Network{opts: opts, byKey: map[string]entry{}}
}

// SetOptions changes the behaviour of a running network.
func (n *Network) SetOptions(opts Options) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.opts = opts
}

// Charges returns every charge made, succeeded or declined, in order.
func (n *Network) Charges() []Charge {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Charge(nil), n.charges...)
}

// Posts returns how many POST /charges requests arrived.
func (n *Network) Posts() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.posts
}

func (n *Network) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/charges":
		n.charge(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/charges":
		var ok []Charge
		for _, c := range n.Charges() {
			if c.Status == "succeeded" {
				ok = append(ok, c)
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"charges": ok, "count": len(ok)})
	case r.Method == http.MethodGet && r.URL.Path == "/events":
		events := n.Events()
		writeJSON(w, http.StatusOK, map[string]any{"events": events, "count": len(events)})
	default:
		http.NotFound(w, r)
	}
}

func (n *Network) charge(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	var req Request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || key == "" || req.Amount <= 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "need an Idempotency-Key and a JSON body with a positive amount"})
		return
	}
	n.mu.Lock()
	n.posts++
	opts := n.opts
	if opts.OnRequest != nil {
		opts.OnRequest(key, req)
	}
	if rand.Float64() < opts.FailBefore {
		n.mu.Unlock()
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "try again"})
		return
	}
	e, seen := n.byKey[key]
	if seen && e.req != req {
		n.mu.Unlock()
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": "this key was used for another charge"})
		return
	}
	if !seen {
		c := Charge{ID: fmt.Sprintf("ch_%d", len(n.charges)+1), Key: key, Amount: req.Amount,
			Currency: req.Currency, Customer: req.Customer, Status: "succeeded", Account: req.Account}
		if req.Amount == DeclinedAmount {
			c.ID, c.Status = "", "declined"
		}
		e = entry{req: req, charge: c}
		n.byKey[key] = e
		n.charges = append(n.charges, c)
		if c.Status == "succeeded" {
			n.newEventLocked(EventChargeSucceeded, c)
		}
	}
	n.mu.Unlock()
	if !seen && opts.OnCharge != nil {
		opts.OnCharge(e.charge)
	}
	if opts.Latency > 0 {
		select {
		case <-time.After(opts.Latency):
		case <-r.Context().Done():
			return
		}
	}
	if rand.Float64() < opts.FailAfter {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "try again"})
		return
	}
	status := http.StatusCreated
	if e.charge.Status == "declined" {
		status = http.StatusPaymentRequired
	}
	writeJSON(w, status, e.charge)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
