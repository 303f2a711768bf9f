// Package demo is the scripted story `make demo` tells, and the test that
// checks it: it starts PostgreSQL, the fake card network and the payments
// service as a real process, then pays through the generated client
// (payclient), shows the card network's signed webhooks (a duplicate
// delivery replayed, a forged one refused), kills the service in the middle
// of a payment, restarts it, and counts payments, charges, emails and
// applied webhook events. Every step checks what it shows; the first
// surprise ends the story with an error.
package demo

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/examples/payments/cardnet"
	"github.com/idemgen/idemgen/examples/payments/internal/payer"
	"github.com/idemgen/idemgen/examples/payments/outbox"
	"github.com/idemgen/idemgen/examples/payments/payclient"
	"github.com/idemgen/idemgen/internal/childproc"
	"github.com/idemgen/idemgen/pglocal"
	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/idemsig"
)

// Config says where the pieces are.
type Config struct {
	// Server is the path of the built payments binary.
	Server string
	// Out receives the story. With DATABASE_URL set in the environment, the
	// demo creates (and drops) a database of its own on that server instead
	// of starting a throwaway cluster.
	Out io.Writer
	// Dir holds the service's log and mail sink; a temp dir when empty.
	Dir string
}

// Tally is the final count.
type Tally struct {
	Intents, Succeeded, Declined int
	Payments, Charges, Emails    int
	// Events are the card network's webhook events; Applied counts their
	// rows in card_events, Deliveries every attempt to deliver them.
	Events, Applied, Deliveries int
}

type story struct {
	cfg     Config
	out     io.Writer
	dbURL   string
	cards   *cardnet.Network
	cardURL string
	sink    *outbox.Sink
	logPath string
	server  *childproc.Process
	base    string
	secret  []byte // the card network's webhook signing secret
	step    int
	http    *http.Client // for the card network's GET /charges
	mu      sync.Mutex
}

// Run tells the story. It stops everything it started before returning.
func Run(ctx context.Context, cfg Config) (*Tally, error) {
	s := &story{cfg: cfg, out: cfg.Out, http: &http.Client{Timeout: 30 * time.Second}}
	if s.out == nil {
		s.out = io.Discard
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "payments-demo-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	s.logPath = filepath.Join(dir, "payments.log")
	s.sink = &outbox.Sink{Path: filepath.Join(dir, "mail.jsonl")}

	s.say("Starting PostgreSQL (DATABASE_URL, or a throwaway cluster from the local binaries)...")
	env, err := pglocal.Open(ctx, "payments_demo", pglocal.Options{})
	if err != nil {
		return nil, err
	}
	defer env.Close()
	s.dbURL = env.URL

	s.cards = cardnet.New(cardnet.Options{})
	defer s.cards.Close()
	secret := make([]byte, 32)
	rand.Read(secret)
	s.secret = []byte(hex.EncodeToString(secret)) // it travels in the service's environment
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cardSrv := &http.Server{Handler: s.cards}
	go cardSrv.Serve(ln)
	defer cardSrv.Close()
	s.cardURL = "http://" + ln.Addr().String()
	s.say("Fake card network on %s (it honours Idempotency-Key and lists its charges at GET /charges).", s.cardURL)

	if err := s.start(); err != nil {
		return nil, err
	}
	defer s.stop()
	// Every event is delivered twice here, to show the duplicate replayed.
	s.cards.SetWebhooks(cardnet.Webhooks{URL: s.base + api.WebhookRoute, Secret: s.secret, DuplicateShare: 1,
		MinWait: 100 * time.Millisecond, MaxWait: time.Second})
	s.say("The card network signs a webhook event for each charge and delivers it to %s%s at least once (here, twice).", s.base, api.WebhookRoute)
	t, err := s.tell(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w\n(the service's log is %s)", err, s.logPath)
	}
	return t, nil
}

func (s *story) say(format string, args ...any) {
	s.mu.Lock() // the card network's hook speaks from its own goroutine
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, format+"\n", args...)
}

func (s *story) title(text string) {
	s.step++
	s.say("\n%d. %s", s.step, text)
}

// start runs the payments binary (again, after a kill).
func (s *story) start() error {
	if s.server == nil {
		s.server = &childproc.Process{Name: "payments", Bin: s.cfg.Server, Log: s.logPath,
			Args: []string{"-addr", "127.0.0.1:0", "-card-url", s.cardURL, "-mail-sink", s.sink.Path},
			Env:  []string{"DATABASE_URL=" + s.dbURL, cardnet.SecretEnv + "=" + string(s.secret)}}
	}
	if err := s.server.Start(30 * time.Second); err != nil {
		return err
	}
	// A restart listens where the clients already send: the same address.
	s.server.Args[1] = s.server.Addr()
	s.base = "http://" + s.server.Addr()
	s.say("Payments service running, pid %d, on %s (log: %s).", s.server.Pid(), s.base, s.logPath)
	return nil
}

func (s *story) stop() { s.server.Stop() }

type reply struct {
	status int
	header http.Header
	body   []byte
	err    error
	res    idemclient.Result
}

// summary shows an answer the way an HTTP trace would.
func summary(status int, header http.Header, body []byte, err error) string {
	if err != nil {
		return "no answer: " + err.Error()
	}
	extra := ""
	if header.Get("Idempotent-Replayed") == "true" {
		extra += " [Idempotent-Replayed: true]"
	}
	if ra := header.Get("Retry-After"); ra != "" {
		extra += " [Retry-After: " + ra + "]"
	}
	return strings.TrimSpace(fmt.Sprintf("%d %s%s %s", status, http.StatusText(status), extra, bytes.TrimSpace(body)))
}

func (r reply) summary() string { return summary(r.status, r.header, r.body, r.err) }

// client returns the generated payments client, as account acct_ada. Each
// attempt the client retries is reported to onRetry.
func (s *story) client(onRetry func(idemclient.Attempt)) *payclient.IdempotentClient {
	p := idemclient.Policy{MaxAttempts: 40, MaxWait: time.Second, OnAttempt: func(a idemclient.Attempt) {
		if a.Retry && onRetry != nil {
			onRetry(a)
		}
	}}
	return payer.New(s.base, p, &http.Client{Timeout: 30 * time.Second}, payclient.WithRequestEditorFn(payer.Bearer("acct_ada")))
}

// call makes one payment call of amount under key through c.
func call(ctx context.Context, c *payclient.IdempotentClient, key string, amount int) reply {
	resp, res, err := c.CreatePayment(ctx, key, payer.Payment(int64(amount), "ada@example.com", ""))
	r := reply{err: err, res: res}
	if err == nil {
		r.status, r.header, r.body = resp.StatusCode(), resp.HTTPResponse.Header, resp.Body
	}
	return r
}

// retried says what the client does about an attempt it retries.
func retried(a idemclient.Attempt) string {
	return fmt.Sprintf("%s; the client retries in %v with the same key",
		summary(a.Status, a.Header, nil, a.Err), a.Wait.Round(100*time.Millisecond))
}

// pay makes one payment call for the intent whose key is key, through the
// generated client, which retries as idemclient's policy says. Unless
// quiet, it shows the call, every retried attempt and the answer.
func (s *story) pay(ctx context.Context, key string, amount int, quiet bool) reply {
	if !quiet {
		s.say("   → POST /payments  Idempotency-Key: %s  {\"amount\":%d,...}", key, amount)
	}
	onRetry := func(a idemclient.Attempt) { s.say("   ← %s", retried(a)) }
	if quiet {
		onRetry = nil
	}
	r := call(ctx, s.client(onRetry), key, amount)
	if !quiet {
		s.say("   ← %s", r.summary())
	}
	return r
}

func expect(cond bool, format string, args ...any) error {
	if !cond {
		return fmt.Errorf("demo: "+format, args...)
	}
	return nil
}

func (s *story) tell(ctx context.Context) (*Tally, error) {
	t := &Tally{}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()

	s.title("A first payment executes: 201. Its key is minted when the intent is born (a UUIDv7), and stored with it.")
	key := idemclient.NewKey()
	first := s.pay(ctx, key, 1000, false)
	if err := expect(first.status == 201 && !first.res.Replayed, "first call: %s", first.summary()); err != nil {
		return nil, err
	}
	t.Intents, t.Succeeded = t.Intents+1, t.Succeeded+1

	s.title("The caller sends the intent again with its stored key (say, after its own crash): the stored response, byte for byte.")
	retry := s.pay(ctx, key, 1000, false)
	same := retry.status == first.status && bytes.Equal(retry.body, first.body) && retry.header.Get("Location") == first.header.Get("Location")
	s.say("   same status, Location and body as the first answer: %t", same)
	if err := expect(same && retry.res.Replayed, "retry: %s", retry.summary()); err != nil {
		return nil, err
	}

	s.title("The same key with another amount is refused: 422, which the client returns at once.")
	if r := s.pay(ctx, key, 2000, false); r.status != 422 || r.res.Attempts != 1 {
		return nil, expect(false, "reused key: %s after %d attempts", r.summary(), r.res.Attempts)
	}

	if err := s.webhooks(ctx, first.body); err != nil {
		return nil, err
	}

	s.title("Two concurrent calls with one key (the card network is slow now): the second waits on the server for the first, and gets its answer.")
	// The second call is sent once the card network sees the first one's
	// charge: the first execution then surely holds the claim.
	charging := make(chan struct{})
	var charged sync.Once
	s.cards.SetOptions(cardnet.Options{Latency: 1500 * time.Millisecond, OnCharge: func(cardnet.Charge) {
		charged.Do(func() { close(charging) })
	}})
	key = idemclient.NewKey()
	var wg sync.WaitGroup
	var a, b reply
	var waits []idemclient.Attempt
	wg.Add(2)
	go func() { defer wg.Done(); a = s.pay(ctx, key, 2500, true) }()
	go func() {
		defer wg.Done()
		<-charging
		b = call(ctx, s.client(func(at idemclient.Attempt) { waits = append(waits, at) }), key, 2500)
	}()
	wg.Wait()
	s.cards.SetOptions(cardnet.Options{})
	s.say("   → POST /payments  Idempotency-Key: %s  (the second while the first is at the card network)", key)
	s.say("   ← first:  %s", a.summary())
	for _, w := range waits {
		s.say("   ← second: %s", retried(w))
	}
	s.say("   ← second: %s", b.summary())
	if err := expect(a.status == 201 && len(waits) == 0 && b.res.Attempts == 1 &&
		b.status == 201 && b.res.Replayed && bytes.Equal(a.body, b.body),
		"concurrent calls: %s / %s after %d attempts", a.summary(), b.summary(), b.res.Attempts); err != nil {
		return nil, err
	}
	t.Intents, t.Succeeded = t.Intents+1, t.Succeeded+1

	s.title("A declined card is a business outcome: 402, stored and replayed, never retried.")
	key = idemclient.NewKey()
	d1 := s.pay(ctx, key, cardnet.DeclinedAmount, false)
	d2 := s.pay(ctx, key, cardnet.DeclinedAmount, false)
	if err := expect(d1.status == 402 && d2.status == 402 && bytes.Equal(d1.body, d2.body) && d2.res.Replayed &&
		d1.res.Attempts == 1 && d2.res.Attempts == 1, "declined: %s / %s", d1.summary(), d2.summary()); err != nil {
		return nil, err
	}
	t.Intents, t.Declined = t.Intents+1, t.Declined+1

	s.title("The service is killed (SIGKILL) after the card was charged, before the payment was finished, and restarted.")
	s.say("   The client keeps the key: it retries through the crash, the restart and the dead owner's lease.")
	killed := make(chan struct{})
	var once sync.Once
	s.cards.SetOptions(cardnet.Options{Latency: 2 * time.Second, OnCharge: func(c cardnet.Charge) {
		once.Do(func() {
			s.say("   card network: charged %s (%d EUR cents) under key %s", c.ID, c.Amount, c.Key)
			s.say("   kill -9 %d", s.server.Pid())
			s.server.Kill()
			close(killed)
		})
	}})
	key = idemclient.NewKey()
	var resumed reply
	paid := make(chan struct{})
	go func() { defer close(paid); resumed = s.pay(ctx, key, 1500, false) }()
	select {
	case <-killed:
	case <-paid:
		return nil, expect(false, "the payment finished before the kill: %s", resumed.summary())
	}
	s.cards.SetOptions(cardnet.Options{})
	time.Sleep(500 * time.Millisecond) // down for a moment: the client's attempts are refused
	if err := s.start(); err != nil {
		return nil, err
	}
	<-paid
	if err := expect(resumed.status == 201 && resumed.res.Attempts > 1, "resumed call: %s after %d attempts", resumed.summary(), resumed.res.Attempts); err != nil {
		return nil, err
	}
	charges := 0
	var chargeKey string
	for _, c := range s.cards.Charges() {
		if c.Amount == 1500 {
			charges++
			chargeKey = c.Key
		}
	}
	s.say("   %d attempts under one Idempotency-Key; card network charges for this payment: %d (key %s, asked %d times in all)",
		resumed.res.Attempts, charges, chargeKey, s.cards.Posts())
	if err := expect(charges == 1, "the crashed payment was charged %d times", charges); err != nil {
		return nil, err
	}
	t.Intents, t.Succeeded = t.Intents+1, t.Succeeded+1

	s.title("The tally.")
	if err := s.count(ctx, t); err != nil {
		return nil, err
	}
	s.say("   intents:   %d (%d succeeded, %d declined)", t.Intents, t.Succeeded, t.Declined)
	s.say("   payments:  %d succeeded rows in the payments table (%d declined)", t.Payments, t.Declined)
	s.say("   charges:   %d at the card network (GET /charges)", t.Charges)
	s.say("   emails:    %d receipts in the mail sink", t.Emails)
	s.say("   webhooks:  %d events, %d deliveries (retried while the service was down or a payment unfinished, each event twice on purpose); %d applied (card_events rows)", t.Events, t.Deliveries, t.Applied)
	if err := expect(t.Payments == t.Succeeded && t.Charges == t.Succeeded && t.Emails == t.Succeeded &&
		t.Events == t.Succeeded && t.Applied == t.Events, "tally: %+v", *t); err != nil {
		return nil, err
	}
	s.say("\nEvery intent happened exactly once. Stopping everything.")
	return t, nil
}

// webhooks shows the card network's event about the first payment's
// charge: its two deliveries (the second replayed), the one row it left,
// and a forged delivery refused.
func (s *story) webhooks(ctx context.Context, firstBody []byte) error {
	s.title("The card network confirms the charge with a signed webhook, charge.succeeded, and delivers it twice: the second delivery is replayed.")
	var p struct {
		ChargeID string `json:"charge_id"`
	}
	if err := json.Unmarshal(firstBody, &p); err != nil || p.ChargeID == "" {
		return expect(false, "the first payment has no charge: %s", firstBody)
	}
	var ev cardnet.EventStatus
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		found := false
		for _, e := range s.cards.Events() {
			if e.Event.Charge.ID == p.ChargeID && e.Event.Type == cardnet.EventChargeSucceeded {
				ev, found = e, true
			}
		}
		if found && ev.Done {
			break
		}
		if time.Now().After(end) {
			return expect(false, "the event about %s was not delivered twice in 30s: %+v", p.ChargeID, ev)
		}
	}
	for _, d := range ev.Deliveries {
		sig := d.Signature
		if i := strings.Index(sig, ",v1="); i >= 0 && len(sig) > i+20 {
			sig = sig[:i+20] + "…"
		}
		what := "POST"
		if d.Duplicate {
			what = "POST (the same event again)"
		}
		s.say("   → %s %s  %s: %s  %s", what, api.WebhookRoute, cardnet.SignatureHeader, sig, ev.Body)
		h := http.Header{}
		if d.Replayed {
			h.Set("Idempotent-Replayed", "true")
		}
		var err error
		if d.Err != "" {
			err = errors.New(d.Err)
		}
		s.say("   ← %s", summary(d.Status, h, []byte(d.Answer), err))
	}
	last := ev.Deliveries[len(ev.Deliveries)-1]
	first := ev.Deliveries[0]
	for _, d := range ev.Deliveries {
		if d.Status == 200 && !d.Duplicate {
			first = d
		}
	}
	if err := expect(last.Duplicate && last.Status == 200 && last.Replayed && last.Answer == first.Answer,
		"the duplicate delivery: %+v, first %+v", last, first); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var rows int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM card_events WHERE event_id = $1`, ev.Event.ID).Scan(&rows); err != nil {
		return err
	}
	s.say("   rows in card_events for %s: %d (the payment is settled once)", ev.Event.ID, rows)
	if err := expect(rows == 1, "%s applied %d times", ev.Event.ID, rows); err != nil {
		return err
	}

	s.say("   A forged delivery (signed with a guessed secret) is refused before anything is recorded:")
	forged := strings.Replace(ev.Body, ev.Event.ID, "evt_forged", 1)
	req, _ := http.NewRequestWithContext(ctx, "POST", s.base+api.WebhookRoute, strings.NewReader(forged))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(cardnet.SignatureHeader, idemsig.Sign(time.Now(), []byte(forged), []byte("whsec_guess")))
	s.say("   → POST %s  %s  %s", api.WebhookRoute, "(a bad signature)", forged)
	res, err := s.http.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	s.say("   ← %s", summary(res.StatusCode, res.Header, body, nil))
	return expect(res.StatusCode == 401, "forged delivery: %d %s", res.StatusCode, body)
}

// count reads the database, the card network and the mail sink, waiting
// while the outbox relay delivers the last receipts.
func (s *story) count(ctx context.Context, t *Tally) error {
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var declined int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'declined') FROM payments`).
		Scan(&t.Payments, &declined); err != nil {
		return err
	}
	if declined != t.Declined {
		return fmt.Errorf("demo: %d declined payment rows, want %d", declined, t.Declined)
	}
	charges, err := (&cardnet.Client{URL: s.cardURL, HTTP: s.http}).Charges(ctx)
	if err != nil {
		return err
	}
	t.Charges = len(charges)
	// The card network delivers its last events in the background.
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		events := s.cards.Events()
		t.Events, t.Deliveries = len(events), 0
		done := 0
		for _, e := range events {
			t.Deliveries += len(e.Deliveries)
			if e.Done {
				done++
			}
		}
		if done == len(events) || time.Now().After(end) {
			break
		}
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM card_events`).Scan(&t.Applied); err != nil {
		return err
	}
	var duplicated int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT event_id FROM card_events GROUP BY event_id HAVING count(*) > 1) d`).Scan(&duplicated); err != nil {
		return err
	}
	if duplicated > 0 {
		return fmt.Errorf("demo: %d webhook events applied more than once", duplicated)
	}
	mails, err := s.sink.WaitMails(ctx, t.Succeeded, 10*time.Second)
	t.Emails = len(mails)
	return err
}
