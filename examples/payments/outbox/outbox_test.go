package outbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idemtest"
)

func TestMain(m *testing.M) { idemtest.Main(m) }

// TestSinkDeduplicates: many writers, each with its own Sink value (as
// separate processes would have), deliver overlapping ids; each id lands once.
func TestSinkDeduplicates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mail.jsonl")
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := &Sink{Path: path}
			for id := int64(1); id <= 50; id++ {
				if _, err := s.Deliver(Mail{OutboxID: id, To: "a@example.com"}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	mails, err := (&Sink{Path: path}).Mails()
	if err != nil || len(mails) != 50 {
		t.Fatalf("%d mails (%v); want 50", len(mails), err)
	}
}

// TestRelaysDeliverOnce: four relays race over 200 outbox rows of five
// accounts; every row is delivered once and marked.
func TestRelaysDeliverOnce(t *testing.T) {
	pool, _ := idemtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE outbox (account text, id bigserial, recipient text, subject text, body text, delivered_at timestamptz, PRIMARY KEY (account, id));
INSERT INTO outbox (account, recipient, subject, body) SELECT 'acct_' || g % 5, 'a@example.com', 's' || g, 'b' FROM generate_series(1, 200) g`); err != nil {
		t.Fatal(err)
	}
	sink := filepath.Join(t.TempDir(), "mail.jsonl")
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			relay := &Relay{Pool: pool, Sink: &Sink{Path: sink}}
			for {
				n, err := relay.RunOnce(ctx, 7)
				if err != nil {
					t.Error(err)
					return
				}
				if n == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	mails, _ := (&Sink{Path: sink}).Mails()
	seen := map[int64]bool{}
	for _, m := range mails {
		if seen[m.OutboxID] {
			t.Fatalf("outbox row %d delivered twice", m.OutboxID)
		}
		seen[m.OutboxID] = true
	}
	var undelivered int
	pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE delivered_at IS NULL`).Scan(&undelivered)
	if len(seen) != 200 || undelivered != 0 {
		t.Fatal(fmt.Sprintf("%d delivered, %d undelivered; want 200 and 0", len(seen), undelivered))
	}
}

// TestSinkTornLine: a line torn by a writer that died mid-write neither
// hides nor corrupts the next mail.
func TestSinkTornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mail.jsonl")
	a := &Sink{Path: path}
	if _, err := a.Deliver(Mail{OutboxID: 1}); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"outbox_id":2,"to":"x`) // the dead writer's half line
	f.Close()
	// Both a sink that indexed the file before the tear and a fresh one
	// deliver 3 once.
	for _, s := range []*Sink{a, {Path: path}} {
		if _, err := s.Deliver(Mail{OutboxID: 3}); err != nil {
			t.Fatal(err)
		}
	}
	mails, _ := (&Sink{Path: path}).Mails()
	var ids []int64
	for _, m := range mails {
		ids = append(ids, m.OutboxID)
	}
	if fmt.Sprint(ids) != "[1 3]" {
		t.Fatalf("mails %v; want [1 3]", ids)
	}
}

// TestWaitMails: WaitMails returns once the sink holds the mails wanted,
// and, when they never come, once no new mail came for the idle time.
func TestWaitMails(t *testing.T) {
	s := &Sink{Path: filepath.Join(t.TempDir(), "mail.jsonl")}
	go func() {
		for id := int64(1); id <= 3; id++ {
			time.Sleep(20 * time.Millisecond)
			s.Deliver(Mail{OutboxID: id, To: "a@example.com"})
		}
	}()
	ctx := context.Background()
	if mails, err := s.WaitMails(ctx, 3, 10*time.Second); err != nil || len(mails) != 3 {
		t.Fatalf("%d mails (%v); want 3", len(mails), err)
	}
	start := time.Now()
	if mails, err := s.WaitMails(ctx, 4, 300*time.Millisecond); err != nil || len(mails) != 3 {
		t.Fatalf("%d mails (%v); want the 3 there", len(mails), err)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("gave up after %v; want the idle time, 300ms", waited)
	}
}

// TestRelayServesEveryAccount: an account with much mail waiting does not
// hold back another's: one pass of a batch of 100 over 300 rows of one
// account and 1 of another delivers both accounts' mail.
func TestRelayServesEveryAccount(t *testing.T) {
	pool, _ := idemtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE outbox (account text, id bigserial, recipient text, subject text, body text, delivered_at timestamptz, PRIMARY KEY (account, id));
INSERT INTO outbox (account, recipient, subject, body) SELECT 'acct_busy', 'a@example.com', 's' || g, 'b' FROM generate_series(1, 300) g;
INSERT INTO outbox (account, recipient, subject, body) VALUES ('acct_quiet', 'q@example.com', 'q', 'b')`); err != nil {
		t.Fatal(err)
	}
	relay := &Relay{Pool: pool, Sink: &Sink{Path: filepath.Join(t.TempDir(), "mail.jsonl")}}
	if n, err := relay.RunOnce(ctx, 100); err != nil || n == 0 || n > 100 {
		t.Fatalf("one pass: %d delivered, %v; want 1 to 100", n, err)
	}
	var quiet int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE account = 'acct_quiet' AND delivered_at IS NOT NULL`).Scan(&quiet); err != nil || quiet != 1 {
		t.Fatalf("acct_quiet's mail delivered %d times after a pass (%v); want 1", quiet, err)
	}
}
