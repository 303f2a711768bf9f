package chaos

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgen/idemgen/examples/payments/cardnet"
	"github.com/idemgen/idemgen/internal/testshort"
)

func build(t *testing.T) (payments, cardnet string) {
	t.Helper()
	dir := t.TempDir()
	payments, cardnet = filepath.Join(dir, "payments"), filepath.Join(dir, "cardnet")
	for bin, pkg := range map[string]string{payments: "../cmd/payments", cardnet: "../cmd/cardnet"} {
		if out, err := exec.Command("go", "build", "-race", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, out)
		}
	}
	return payments, cardnet
}

// TestShortRound is the chaos round of `make test`: at least 200 intents with
// kills, connection faults, a PostgreSQL restart, a slow card network and
// dropped responses, while the card network delivers its signed webhooks
// through the same faults; no intent may be duplicated or lost, and every
// webhook event must be applied exactly once.
func TestShortRound(t *testing.T) {
	testshort.Long(t)
	payments, cardnet := build(t)
	var log bytes.Buffer
	cfg := ShortRound(payments, cardnet)
	cfg.Out, cfg.Dir = &log, t.TempDir()
	rep, err := Run(context.Background(), cfg)
	t.Log("\n" + log.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Table())
	if err := rep.CheckShortRound(); err != nil {
		t.Fatal(err)
	}
}

// TestJudgeWebhooks: the webhook checker reports an event applied twice, an
// event never applied, a row for an event never sent, and a deliberate
// second delivery that was not a replay.
func TestJudgeWebhooks(t *testing.T) {
	ev := func(id string, deliveries ...cardnet.Delivery) cardnet.EventStatus {
		return cardnet.EventStatus{Event: cardnet.Event{ID: id, Type: cardnet.EventChargeSucceeded}, Deliveries: deliveries, Done: true}
	}
	ok := cardnet.Delivery{Status: 200}
	replayed := cardnet.Delivery{Status: 200, Duplicate: true, Replayed: true}
	r := &run{}
	r.judgeWebhooks([]cardnet.EventStatus{
		ev("evt_ok", cardnet.Delivery{Status: 503}, ok, replayed), // fine
		ev("evt_twice", ok),
		ev("evt_missing", cardnet.Delivery{Status: 503}),
		ev("evt_not_replayed", ok, cardnet.Delivery{Status: 200, Duplicate: true}),
	}, map[string]int{"evt_ok": 1, "evt_twice": 2, "evt_not_replayed": 1, "evt_stranger": 1})
	rep := r.report
	if rep.WebhookEvents != 4 || rep.WebhookDeliveries != 7 || rep.WebhookDuplicatesSent != 2 || rep.WebhookReplays != 1 ||
		rep.WebhookAppliedTwice != 2 || rep.WebhookMissing != 1 || len(rep.Problems) != 4 || rep.OK() {
		t.Fatalf("report %+v", rep)
	}
}

// TestCheckerCatchesDuplicates: without the derived key, card charges that
// failed ambiguously are repeated under new keys, and the checker must say so.
func TestCheckerCatchesDuplicates(t *testing.T) {
	testshort.Long(t)
	payments, cardnet := build(t)
	rep, err := Run(context.Background(), Config{
		Seed: 7, Clients: 4, Intents: 10, CardFailAfter: 0.4, UnsafeKeys: true,
		FaultEvery: time.Second, Deadline: 90 * time.Second,
		PaymentsBin: payments, CardnetBin: cardnet, Dir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Duplicates == 0 {
		t.Fatalf("unsafe keys produced no duplicates the checker could see:\n%s", rep.Table())
	}
	t.Logf("checker found %d duplicates, e.g. %s; idemgen reconcile found %d natural keys completed twice, the payments table %d intents paid twice",
		rep.Duplicates, rep.Problems[0], rep.NaturalDuplicates, rep.IntentsPaidTwice)
}

// TestJudgeRefunds: the refund checker reports an over-refunded payment, a
// refund row without a 201 (a duplicate) and a 201 without a row (a loss).
func TestJudgeRefunds(t *testing.T) {
	ok := func(id string, payment int64, status int) *refundIntent {
		return &refundIntent{id: id, payment: payment, amount: 40, status: status, bodies: [][]byte{[]byte("{}")}}
	}
	r := &run{}
	r.judgeRefunds(map[int64]refundTruth{
		1: {amount: 100, refunded: 80, rows: 2},  // two 201s, two rows: fine
		2: {amount: 100, refunded: 120, rows: 3}, // over-refunded
		3: {amount: 100, refunded: 80, rows: 2},  // one 201, two rows: a duplicate
		4: {amount: 100, refunded: 0, rows: 0},   // one 201, no row: a loss
	}, []*refundIntent{ok("a", 1, 201), ok("b", 1, 201), ok("c", 1, 409),
		ok("d", 2, 201), ok("e", 2, 201), ok("f", 2, 201), ok("g", 3, 201), ok("h", 4, 201)})
	rep := r.report
	if rep.OverRefunded != 1 || rep.Duplicates != 1 || rep.Losses != 1 || rep.Refunds != 8 || rep.RefundsSucceeded != 7 {
		t.Fatalf("over-refunded %d, duplicates %d, losses %d, refunds %d (%d succeeded); want 1, 1, 1, 8 (7):\n%v",
			rep.OverRefunded, rep.Duplicates, rep.Losses, rep.Refunds, rep.RefundsSucceeded, rep.Problems)
	}
}

// TestCheckerCatchesClientKeyPerAttempt: a client that mints a key per
// attempt, not per intent, executes a payment again on every retry after a
// dropped response and on the verification call; the checker must say so.
func TestCheckerCatchesClientKeyPerAttempt(t *testing.T) {
	testshort.Long(t)
	payments, cardnet := build(t)
	rep, err := Run(context.Background(), Config{
		Seed: 11, Clients: 4, RetryableClients: 1, Intents: 5, DropRate: 0.2, UnsafeClientKeys: true,
		FaultEvery: time.Second, Deadline: 90 * time.Second,
		PaymentsBin: payments, CardnetBin: cardnet, Dir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Duplicates == 0 {
		t.Fatalf("a key per attempt produced no duplicates the checker could see:\n%s", rep.Table())
	}
	// The store finds them too, by the payments' natural key (their
	// reference): each intent paid twice, and nothing else.
	if rep.NaturalDuplicates == 0 || rep.NaturalDuplicates != rep.IntentsPaidTwice {
		t.Fatalf("idemgen reconcile found %d natural keys completed twice; the payments table shows %d intents paid twice:\n%s",
			rep.NaturalDuplicates, rep.IntentsPaidTwice, rep.Table())
	}
	t.Logf("checker found %d duplicates, e.g. %s; idemgen reconcile found %d natural keys completed twice, the payments table %d intents paid twice",
		rep.Duplicates, rep.Problems[0], rep.NaturalDuplicates, rep.IntentsPaidTwice)
}

type fakeDB struct{}

func (fakeDB) URL() string {
	return "postgres://postgres@h1:5432,h2:5432/chaos?target_session_attrs=read-write"
}
func (fakeDB) Fail(context.Context) (string, error) { return "", nil }

// TestExternalDatabase: a round on an external database refuses the faults
// that need the round's own cluster, a failover needs a database to fail,
// and the services connect with the database's URL plus their pool's
// settings and the query-exec mode.
func TestExternalDatabase(t *testing.T) {
	ctx := context.Background()
	if _, err := Run(ctx, Config{Database: fakeDB{}, ConnFaults: 1}); err == nil {
		t.Error("connection faults on an external database were accepted")
	}
	if _, err := Run(ctx, Config{Database: fakeDB{}, PGRestarts: 1}); err == nil {
		t.Error("PostgreSQL restarts of an external database were accepted")
	}
	if _, err := Run(ctx, Config{Failovers: 1}); err == nil {
		t.Error("a failover without a database to fail was accepted")
	}
	r := &run{cfg: Config{Database: fakeDB{}, QueryExecMode: "cache_describe"}, dbURL: fakeDB{}.URL()}
	want := fakeDB{}.URL() + "&pool_max_conns=16&connect_timeout=5&default_query_exec_mode=cache_describe"
	if got := r.serviceURL(0); got != want {
		t.Errorf("service URL\n got %s\nwant %s", got, want)
	}
}
