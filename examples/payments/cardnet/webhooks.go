package cardnet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemgen/idemgen/runtime/idemsig"
)

// Webhook events, as the network sends them.
const (
	// SignatureHeader carries each delivery's signature, in idemsig's
	// scheme: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">.
	SignatureHeader = "Cardnet-Signature"
	// SecretEnv names the environment variable holding the signing secret
	// shared by the network and the payments service (cmd/cardnet,
	// cmd/payments).
	SecretEnv = "CARDNET_WEBHOOK_SECRET"

	EventChargeSucceeded = "charge.succeeded"
	EventChargeRefunded  = "charge.refunded"
)

// Event is one webhook event about a charge. Its JSON is the same on every
// delivery; only the signature header changes.
type Event struct {
	ID      string      `json:"id"`   // evt_ and 24 hex digits
	Type    string      `json:"type"` // charge.succeeded | charge.refunded
	Created int64       `json:"created"`
	Charge  EventCharge `json:"charge"`
}

// EventCharge is the charge an event is about.
type EventCharge struct {
	ID       string `json:"id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Account  string `json:"account,omitempty"` // the charge's (Request.Account)
}

// Webhooks configures the network's webhook deliveries.
type Webhooks struct {
	// URL receives every event, POSTed as JSON; no events are made while
	// it is empty.
	URL string
	// Secret signs each delivery (idemsig.Sign, with a fresh timestamp per
	// attempt).
	Secret []byte
	// DuplicateShare is the probability (0..1) that an event, once
	// delivered (a 2xx), is delivered a second time on purpose, as real
	// networks sometimes do.
	DuplicateShare float64
	// RefundShare is the probability that the network later refunds a
	// succeeded charge on its own (a dispute the merchant lost) and sends
	// charge.refunded.
	RefundShare float64
	// MinWait and MaxWait bound the backoff between attempts: MinWait,
	// doubling up to MaxWait, each drawn between half and all of it
	// (defaults 200ms and 5s).
	MinWait, MaxWait time.Duration
	// Timeout bounds each attempt (default 10s).
	Timeout time.Duration
}

// Delivery is one attempt to deliver an event.
type Delivery struct {
	At        time.Time `json:"at"`
	Duplicate bool      `json:"duplicate,omitempty"` // part of the deliberate second delivery
	Status    int       `json:"status"`              // 0 when no answer came
	Err       string    `json:"err,omitempty"`
	Replayed  bool      `json:"replayed,omitempty"` // the answer was marked Idempotent-Replayed: true
	Signature string    `json:"signature"`
	Answer    string    `json:"answer,omitempty"` // the answer's body
}

// EventStatus is an event and every attempt to deliver it.
type EventStatus struct {
	Event      Event      `json:"event"`
	Body       string     `json:"body"`      // the JSON sent on every attempt
	Delivered  bool       `json:"delivered"` // some attempt got a 2xx
	Duplicate  bool       `json:"duplicate"` // a second delivery is planned or made
	Done       bool       `json:"done"`      // every planned delivery got its 2xx
	Deliveries []Delivery `json:"deliveries"`
}

// webhooks is the network's delivery state.
type webhooks struct {
	cfg    Webhooks
	events []*EventStatus // in creation order
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// SetWebhooks configures deliveries for the charges made from now on; the
// events already made keep being delivered with the new settings' URL and
// secret. SetOptions leaves it alone.
func (n *Network) SetWebhooks(w Webhooks) {
	if w.MinWait <= 0 {
		w.MinWait = 200 * time.Millisecond
	}
	if w.MaxWait < w.MinWait {
		w.MaxWait = max(5*time.Second, w.MinWait)
	}
	if w.Timeout <= 0 {
		w.Timeout = 10 * time.Second
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hooks.cfg = w
	if n.hooks.ctx == nil {
		n.hooks.ctx, n.hooks.cancel = context.WithCancel(context.Background())
	}
}

// Events returns every webhook event made so far, with its deliveries.
func (n *Network) Events() []EventStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]EventStatus, len(n.hooks.events))
	for i, e := range n.hooks.events {
		out[i] = *e
		out[i].Deliveries = append([]Delivery(nil), e.Deliveries...)
	}
	return out
}

// Close stops delivering events and waits for the deliveries in flight.
func (n *Network) Close() {
	n.mu.Lock()
	cancel := n.hooks.cancel
	n.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	n.hooks.wg.Wait()
}

// newEventLocked makes an event about c and starts delivering it. n.mu is
// held.
func (n *Network) newEventLocked(typ string, c Charge) {
	if n.hooks.cfg.URL == "" || n.hooks.ctx.Err() != nil {
		return
	}
	id := make([]byte, 12)
	rand.Read(id)
	ev := Event{ID: "evt_" + hex.EncodeToString(id), Type: typ, Created: time.Now().Unix(),
		Charge: EventCharge{ID: c.ID, Amount: c.Amount, Currency: c.Currency, Account: c.Account}}
	body, _ := json.Marshal(ev)
	st := &EventStatus{Event: ev, Body: string(body), Duplicate: mrand.Float64() < n.hooks.cfg.DuplicateShare}
	n.hooks.events = append(n.hooks.events, st)
	refund := typ == EventChargeSucceeded && mrand.Float64() < n.hooks.cfg.RefundShare
	ctx := n.hooks.ctx
	n.hooks.wg.Add(1)
	go func() {
		defer n.hooks.wg.Done()
		if !n.deliver(ctx, st, body, false) {
			return
		}
		if st.Duplicate && !n.deliver(ctx, st, body, true) {
			return
		}
		n.mu.Lock()
		st.Done = true
		if refund {
			n.newEventLocked(EventChargeRefunded, c)
		}
		n.mu.Unlock()
	}()
}

// deliver posts body until an attempt gets a 2xx, waiting with backoff in
// between; it returns false when ctx ended first.
func (n *Network) deliver(ctx context.Context, st *EventStatus, body []byte, duplicate bool) bool {
	n.mu.Lock()
	wait := n.hooks.cfg.MinWait
	n.mu.Unlock()
	for {
		n.mu.Lock()
		cfg := n.hooks.cfg
		n.mu.Unlock()
		d := attempt(ctx, cfg, body)
		d.Duplicate = duplicate
		ok := d.Status >= 200 && d.Status <= 299
		n.mu.Lock()
		st.Deliveries = append(st.Deliveries, d)
		st.Delivered = st.Delivered || ok
		n.mu.Unlock()
		if ok {
			return true
		}
		half := wait / 2
		t := time.NewTimer(half + mrand.N(wait-half+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(2*wait, cfg.MaxWait)
	}
}

// attempt makes one signed delivery.
func attempt(ctx context.Context, cfg Webhooks, body []byte) Delivery {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	d := Delivery{At: time.Now(), Signature: idemsig.Sign(time.Now(), body, cfg.Secret)}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL, bytes.NewReader(body))
	if err != nil {
		d.Err = err.Error()
		return d
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, d.Signature)
	res, err := webhookClient.Do(req)
	if err != nil {
		d.Err = err.Error()
		return d
	}
	defer res.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	d.Status, d.Answer = res.StatusCode, strings.TrimSpace(string(answer))
	d.Replayed = strings.EqualFold(res.Header.Get("Idempotent-Replayed"), "true")
	return d
}

// webhookClient sends deliveries; each attempt's context bounds it.
var webhookClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}}
