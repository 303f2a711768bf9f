package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/examples/payments/cardnet"
	"github.com/idemgen/idemgen/runtime/idemsig"
)

// testSecret is the webhook secret newService gives the service.
var testSecret = []byte("whsec_test")

// pay makes one payment and returns its id and its card network charge.
func pay(t *testing.T, s *service, key string) (int64, string) {
	t.Helper()
	a := do(t, s.url+"/payments", hdrs(key), payment)
	var p struct {
		ID       int64  `json:"id"`
		ChargeID string `json:"charge_id"`
	}
	if a.status != 201 || json.Unmarshal([]byte(a.body), &p) != nil {
		t.Fatalf("payment: %d %s", a.status, a.body)
	}
	return p.ID, p.ChargeID
}

// signed returns the headers of a delivery of body signed with secret.
func signed(body string, secret []byte) [][2]string {
	return [][2]string{{"Content-Type", "application/json"}, {cardnet.SignatureHeader, idemsig.Sign(time.Now(), []byte(body), secret)}}
}

func cardEvent(id, typ, charge string) string {
	return fmt.Sprintf(`{"id":%q,"type":%q,"created":1767225600,"charge":{"id":%q,"amount":1000,"currency":"EUR","account":"acct_a"}}`, id, typ, charge)
}

// TestWebhookReceiver: the generated POST /webhooks/cardnet verifies the
// signature before anything else, keys on the event's id, and applies each
// event once: a duplicate delivery is a replay (one row, one effect), a
// different body under the same id is 422, a bad signature is 401 and an
// event without its id is 400, neither leaving a record.
func TestWebhookReceiver(t *testing.T) {
	s := newService(t)
	url := s.url + api.WebhookRoute
	paymentID, charge := pay(t, s, "pay-hook-1")
	ev := cardEvent("evt_1", "charge.succeeded", charge)

	first := do(t, url, signed(ev, testSecret), ev)
	if first.status != 200 || !strings.Contains(first.body, `"event":"evt_1"`) || !strings.Contains(first.body, fmt.Sprintf(`"payment_id":%d`, paymentID)) {
		t.Fatalf("first delivery: %d %s", first.status, first.body)
	}
	time.Sleep(1100 * time.Millisecond) // a redelivery is signed again, with a later timestamp
	again := do(t, url, signed(ev, testSecret), ev)
	if again.status != 200 || again.body != first.body {
		t.Fatalf("duplicate delivery: %d %s; want the first answer %s", again.status, again.body, first.body)
	}
	if n := s.count(`SELECT count(*) FROM card_events WHERE event_id = 'evt_1'`); n != 1 {
		t.Fatalf("evt_1 applied %d times; want 1", n)
	}
	if n := s.count(fmt.Sprintf(`SELECT count(*) FROM payments WHERE id = %d AND settled_at IS NOT NULL`, paymentID)); n != 1 {
		t.Fatal("charge.succeeded did not settle the payment")
	}
	t.Logf("duplicate delivery of evt_1: %d %s (applied once)", again.status, again.body)

	other := cardEvent("evt_1", "charge.refunded", charge)
	if a := do(t, url, signed(other, testSecret), other); a.status != 422 || a.problem.Type != "urn:idemgen:problem:key-reused" {
		t.Fatalf("another event under evt_1: %d %s; want 422 key-reused", a.status, a.body)
	}

	records := s.count(`SELECT count(*) FROM records`)
	for name, tc := range map[string]struct {
		headers [][2]string
		body    string
		status  int
		typ     string
	}{
		"unsigned":           {[][2]string{{"Content-Type", "application/json"}}, cardEvent("evt_2", "charge.succeeded", charge), 401, "urn:idemgen:problem:invalid-signature"},
		"forged":             {signed(cardEvent("evt_3", "charge.succeeded", charge), []byte("whsec_guess")), cardEvent("evt_3", "charge.succeeded", charge), 401, "urn:idemgen:problem:invalid-signature"},
		"tampered":           {signed(cardEvent("evt_4", "charge.succeeded", charge), testSecret), cardEvent("evt_4", "charge.refunded", charge), 401, "urn:idemgen:problem:invalid-signature"},
		"missing id":         {signed(`{"type":"charge.succeeded"}`, testSecret), `{"type":"charge.succeeded"}`, 400, "urn:idemgen:problem:missing-key"},
		"empty id":           {signed(cardEvent("", "charge.succeeded", charge), testSecret), cardEvent("", "charge.succeeded", charge), 400, "urn:idemgen:problem:invalid-key"},
		"unknown charge":     {signed(cardEvent("evt_5", "charge.succeeded", "ch_nope"), testSecret), cardEvent("evt_5", "charge.succeeded", "ch_nope"), 503, "about:blank"},
		"unknown event type": {signed(cardEvent("evt_6", "charge.disputed", charge), testSecret), cardEvent("evt_6", "charge.disputed", charge), 400, "about:blank"},
	} {
		a := do(t, url, tc.headers, tc.body)
		if a.status != tc.status || a.problem.Type != tc.typ {
			t.Errorf("%s: %d %s; want %d %s", name, a.status, a.body, tc.status, tc.typ)
		}
		t.Logf("%s: %d %s", name, a.status, a.body)
	}
	if n := s.count(`SELECT count(*) FROM records`); n != records {
		t.Fatalf("refused deliveries left %d records", n-records)
	}
	if n := s.count(`SELECT count(*) FROM card_events`); n != 1 {
		t.Fatalf("%d card events applied; want 1", n)
	}
}

// TestCardnetWebhooksAppliedOnce: the card network announces its charges
// to the service at least once (retries, deliberate duplicates, refunds),
// and every event is applied exactly once.
func TestCardnetWebhooksAppliedOnce(t *testing.T) {
	s := newService(t)
	s.cards.SetWebhooks(cardnet.Webhooks{URL: s.url + api.WebhookRoute, Secret: testSecret, DuplicateShare: 0.5, RefundShare: 0.5,
		MinWait: 20 * time.Millisecond, MaxWait: 200 * time.Millisecond})
	for i := range 6 {
		pay(t, s, fmt.Sprintf("pay-hooks-%d", i))
	}
	deadline := time.Now().Add(30 * time.Second)
	var events []cardnet.EventStatus
	for {
		events = s.cards.Events()
		done := 0
		for _, e := range events {
			if e.Done {
				done++
			}
		}
		if len(events) >= 6 && done == len(events) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events delivered in 30s: %+v", done, len(events), events)
		}
		time.Sleep(50 * time.Millisecond)
	}
	duplicates := 0
	for _, e := range events {
		if n := s.count(fmt.Sprintf(`SELECT count(*) FROM card_events WHERE event_id = '%s'`, e.Event.ID)); n != 1 {
			t.Errorf("event %s (%s) applied %d times; want 1", e.Event.ID, e.Event.Type, n)
		}
		for _, d := range e.Deliveries {
			if d.Duplicate && d.Status == 200 {
				duplicates++
				if !d.Replayed {
					t.Errorf("the duplicate delivery of %s was not a replay: %+v", e.Event.ID, d)
				}
			}
		}
	}
	if n := s.count(`SELECT count(*) FROM card_events`); n != len(events) {
		t.Fatalf("%d card events applied for %d events sent", n, len(events))
	}
	if n := s.count(`SELECT count(*) FROM payments WHERE settled_at IS NULL`); n != 0 {
		t.Fatalf("%d payments not settled", n)
	}
	t.Logf("%d events sent, %d deliberate duplicates replayed, each applied once", len(events), duplicates)
}
