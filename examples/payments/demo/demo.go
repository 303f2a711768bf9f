// Package demo is the scripted story `make demo` tells, and the test that
// checks it: it starts PostgreSQL, the fake card network and the payments
// service as a real process, then sends requests, kills the service in the
// middle of a payment, restarts it, and counts payments, charges and emails.
// Every step checks what it shows; the first surprise ends the story with an
// error.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/payments/cardnet"
	"github.com/idemgen/idemgen/examples/payments/outbox"
	"github.com/idemgen/idemgen/internal/childproc"
	"github.com/idemgen/idemgen/runtime/pglocal"
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
	step    int
	client  *http.Client
	mu      sync.Mutex
}

// Run tells the story. It stops everything it started before returning.
func Run(ctx context.Context, cfg Config) (*Tally, error) {
	s := &story{cfg: cfg, out: cfg.Out, client: &http.Client{Timeout: 30 * time.Second}}
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
			Env:  []string{"DATABASE_URL=" + s.dbURL}}
	}
	if err := s.server.Start(30 * time.Second); err != nil {
		return err
	}
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
}

func (r reply) summary() string {
	if r.err != nil {
		return "no answer: " + r.err.Error()
	}
	extra := ""
	if r.header.Get("Idempotent-Replayed") == "true" {
		extra += " [Idempotent-Replayed: true]"
	}
	if ra := r.header.Get("Retry-After"); ra != "" {
		extra += " [Retry-After: " + ra + "]"
	}
	return fmt.Sprintf("%d %s%s %s", r.status, http.StatusText(r.status), extra, bytes.TrimSpace(r.body))
}

func (s *story) pay(key string, amount int, quiet bool) reply {
	body := fmt.Sprintf(`{"amount":%d,"currency":"EUR","customer":"ada@example.com","client_ts":"%s"}`, amount, time.Now().Format(time.RFC3339Nano))
	if !quiet {
		s.say("   → POST /payments  Idempotency-Key: %s  {\"amount\":%d,...}", key, amount)
	}
	req, _ := http.NewRequest("POST", s.base+"/payments", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer acct_ada")
	req.Header.Set("Idempotency-Key", key)
	res, err := s.client.Do(req)
	if err != nil {
		r := reply{err: err}
		if !quiet {
			s.say("   ← %s", r.summary())
		}
		return r
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	r := reply{status: res.StatusCode, header: res.Header, body: b, err: err}
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

	s.title("A first payment executes: 201.")
	first := s.pay("k-first", 1000, false)
	if err := expect(first.status == 201 && first.header.Get("Idempotent-Replayed") == "", "first call: %s", first.summary()); err != nil {
		return nil, err
	}
	t.Intents, t.Succeeded = t.Intents+1, t.Succeeded+1

	s.title("The client retries it (say, after a timeout): the stored response, byte for byte.")
	retry := s.pay("k-first", 1000, false)
	same := retry.status == first.status && bytes.Equal(retry.body, first.body) && retry.header.Get("Location") == first.header.Get("Location")
	s.say("   same status, Location and body as the first answer: %t", same)
	if err := expect(same && retry.header.Get("Idempotent-Replayed") == "true", "retry: %s", retry.summary()); err != nil {
		return nil, err
	}

	s.title("The same key with another amount is refused: 422.")
	if r := s.pay("k-first", 2000, false); r.status != 422 {
		return nil, expect(false, "reused key: %s", r.summary())
	}

	s.title("Two concurrent calls with one key (the card network is slow now): 201 and 409.")
	// The second call is sent once the card network sees the first one's
	// charge: the first execution then surely holds the claim.
	charging := make(chan struct{})
	var charged sync.Once
	s.cards.SetOptions(cardnet.Options{Latency: 1500 * time.Millisecond, OnCharge: func(cardnet.Charge) {
		charged.Do(func() { close(charging) })
	}})
	var wg sync.WaitGroup
	var a, b reply
	wg.Add(2)
	go func() { defer wg.Done(); a = s.pay("k-concurrent", 2500, true) }()
	go func() { defer wg.Done(); <-charging; b = s.pay("k-concurrent", 2500, true) }()
	wg.Wait()
	s.cards.SetOptions(cardnet.Options{})
	s.say("   → POST /payments  Idempotency-Key: k-concurrent  (the second while the first is at the card network)")
	s.say("   ← first:  %s", a.summary())
	s.say("   ← second: %s", b.summary())
	if err := expect(a.status == 201 && b.status == 409 && b.header.Get("Retry-After") != "", "concurrent calls: %s / %s", a.summary(), b.summary()); err != nil {
		return nil, err
	}
	t.Intents, t.Succeeded = t.Intents+1, t.Succeeded+1

	s.title("A declined card is a business outcome: 402, stored and replayed.")
	d1 := s.pay("k-declined", cardnet.DeclinedAmount, false)
	d2 := s.pay("k-declined", cardnet.DeclinedAmount, false)
	if err := expect(d1.status == 402 && d2.status == 402 && bytes.Equal(d1.body, d2.body) && d2.header.Get("Idempotent-Replayed") == "true",
		"declined: %s / %s", d1.summary(), d2.summary()); err != nil {
		return nil, err
	}
	t.Intents, t.Declined = t.Intents+1, t.Declined+1

	s.title("The service is killed (SIGKILL) after the card was charged, before the payment was finished.")
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
	crash := s.pay("k-crash", 1500, false)
	<-killed
	s.cards.SetOptions(cardnet.Options{})
	if err := expect(crash.err != nil || crash.status >= 500, "the call during the crash got %s", crash.summary()); err != nil {
		return nil, err
	}
	if err := s.start(); err != nil {
		return nil, err
	}
	s.say("   The client retries with the same key, honouring Retry-After while the dead owner's lease runs out:")
	var resumed reply
	deadline := time.Now().Add(40 * time.Second)
	for {
		resumed = s.pay("k-crash", 1500, false)
		if resumed.status != 409 || time.Now().After(deadline) {
			break
		}
		wait, _ := strconv.Atoi(resumed.header.Get("Retry-After"))
		time.Sleep(time.Duration(max(wait, 1)) * time.Second)
	}
	if err := expect(resumed.status == 201, "resumed retry: %s", resumed.summary()); err != nil {
		return nil, err
	}
	charges := 0
	var key string
	for _, c := range s.cards.Charges() {
		if c.Amount == 1500 {
			charges++
			key = c.Key
		}
	}
	s.say("   card network charges for this payment: %d (key %s, asked %d times in all)", charges, key, s.cards.Posts())
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
	if err := expect(t.Payments == t.Succeeded && t.Charges == t.Succeeded && t.Emails == t.Succeeded,
		"tally: %+v", *t); err != nil {
		return nil, err
	}
	s.say("\nEvery intent happened exactly once. Stopping everything.")
	return t, nil
}

// count reads the database, the card network and the mail sink, waiting a
// little for the outbox relay to deliver the last receipts.
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
	res, err := s.client.Get(s.cardURL + "/charges")
	if err != nil {
		return err
	}
	var list struct {
		Count int `json:"count"`
	}
	err = json.NewDecoder(res.Body).Decode(&list)
	res.Body.Close()
	if err != nil {
		return err
	}
	t.Charges = list.Count
	deadline := time.Now().Add(10 * time.Second)
	for {
		mails, err := s.sink.Mails()
		if err != nil {
			return err
		}
		t.Emails = len(mails)
		if t.Emails >= t.Succeeded || time.Now().After(deadline) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}
