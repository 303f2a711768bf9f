// Package chaos tries hard to break the payments example's promise: per
// account and key, at most one execution commits its effects, and every
// success response is that execution's. It runs PostgreSQL, three service
// processes behind a round-robin proxy, a TCP fault proxy (toxiproxy) between
// each service and the database, and the card network as its own process,
// which sends its signed webhooks through the same proxy; then concurrent
// clients pay while a seeded schedule kills services, cuts and resets
// database connections, slows the card network past the lease, restarts
// PostgreSQL and drops responses after the service answered. The checker
// then counts payments, charges and emails per intent, and applications per
// webhook event.
package chaos

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/payments/cardnet"
	"github.com/idemgen/idemgen/examples/payments/internal/payer"
	"github.com/idemgen/idemgen/examples/payments/outbox"
	"github.com/idemgen/idemgen/internal/childproc"
	"github.com/idemgen/idemgen/pglocal"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
)

// Config sizes a run. A seed reproduces the schedule of faults and the
// clients' choices (the operating system's timing still varies).
type Config struct {
	Seed             uint64
	Clients          int // concurrent clients; the first RetryableClients use go-retryablehttp
	RetryableClients int
	Intents          int           // per client, at least: clients go on while planned faults remain
	Think            time.Duration // pause between a client's intents
	Kills            int           // SIGKILLs of service processes
	ConnFaults       int           // database connection cuts and resets
	PGRestarts       int           // fast restarts of PostgreSQL
	SlowCard         int           // windows in which the card network is slower than the lease
	DropRate         float64       // share of responses dropped after the service answered
	RefundShare      float64       // share of succeeded payments then refunded by a burst of concurrent refunds
	Progress         time.Duration // how often to print progress (default 5s)
	CardFailAfter    float64       // share of card charges made and then answered 503 (ambiguous foreign failures)
	FaultEvery       time.Duration // mean pause between two faults
	Deadline         time.Duration // for all intents to be answered
	// UnsafeKeys runs the services with a fresh card-network key per attempt
	// (no derived key): the checker must then find duplicate charges.
	UnsafeKeys              bool
	PaymentsBin, CardnetBin string
	Dir                     string // logs and the mail sink; a temp dir when empty
	Out                     io.Writer
	// UnsafeClientKeys makes the clients send a fresh Idempotency-Key on
	// every attempt instead of the intent's: the checker must then find
	// duplicate payments.
	UnsafeClientKeys bool
	// Webhooks makes the card network deliver its signed events to the
	// services (through the front proxy, so under the same faults), and
	// the checker count how often each was applied.
	Webhooks bool
	// WebhookDuplicates is the share of events the card network delivers a
	// second time on purpose; WebhookRefunds the share of charges it
	// refunds on its own (charge.refunded).
	WebhookDuplicates, WebhookRefunds float64

	// Database, when set, is the PostgreSQL the round runs on instead of a
	// throwaway cluster of its own (a failover formation): the services
	// connect with its URL directly, so ConnFaults and PGRestarts must be
	// 0, and Failovers is how many times its Fail is called.
	Database  Database
	Failovers int
	// Pooler, when set, is started in front of the round's own cluster, and
	// the services (through their fault proxies) connect to it.
	Pooler Pooler
	// QueryExecMode is pgx's default_query_exec_mode for the services
	// ("" for pgx's default, cache_statement).
	QueryExecMode string
	// ServiceArgs are added to every payments service's command line.
	ServiceArgs []string
	// Prometheus, when set, is a Prometheus server binary the round runs
	// beside the services: it scrapes their /metrics every ScrapeEvery
	// (default 2s) and evaluates Rules (deploy/prometheus/idemgen-rules.yaml),
	// and the report says which alerts were pending or firing and what the
	// signals counted (Report.Alerts, Report.Signals).
	Prometheus, Rules string
	ScrapeEvery       time.Duration
	// LagBeforeFailover, when set, holds the standby's replay back for so
	// long before each failover, then resumes it (the Database must be a
	// ReplayHolder): the services' replication lag gauge rises and, held
	// long enough, its alert fires before the primary is killed.
	LagBeforeFailover time.Duration
}

// ReplayHolder is a Database whose standby's replay can be held back while
// it goes on receiving the primary's WAL.
type ReplayHolder interface {
	HoldReplay(ctx context.Context) (release func(context.Context) error, err error)
}

// Database is a PostgreSQL the round does not start itself.
type Database interface {
	// URL is what the services and the checker connect with (for a
	// failover formation, a multi-host URL that finds the primary). Its
	// database exists.
	URL() string
	// Fail is the "failover" fault: it kills the primary and returns once a
	// standby took over, saying what happened.
	Fail(ctx context.Context) (string, error)
}

// ProxiedDatabase is a Database the round may put its connection faults
// in front of: the services connect to Upstream (host:port) through the
// round's fault proxies, to database Name, and the checker with URL.
type ProxiedDatabase interface {
	Database
	Upstream() (addr, name string)
	// FailName names the Fail fault in the report (default "primary
	// failovers (SIGKILL, promotion)").
	FailName() string
}

// Pooler is a connection pooler the round starts in front of its cluster.
type Pooler interface {
	// Start starts the pooler in front of upstream (host:port) and returns
	// the address the services connect to.
	Start(ctx context.Context, upstream string) (string, error)
	Stop()
}

// Report is what a run found.
type Report struct {
	// FailName names the Database's Fail fault (ProxiedDatabase); "" is
	// a primary's failover.
	FailName                                        string
	Seed                                            uint64
	Intents, Succeeded, Declined                    int
	Attempts, Replays, Conflicts, Errors5xx, Resets int
	Takeovers, Fenced, Resumes                      int
	Kills, ConnFaults, PGRestarts, SlowCard, Drops  int
	Failovers                                       int
	FailoverNotes                                   []string // what each failover did, as its Database said
	// LongestPause is the longest time no intent got its terminal answer
	// while clients were paying (a failover's outage, seen by clients).
	LongestPause                            time.Duration
	Refunds, RefundsSucceeded, OverRefunded int
	Duplicates, Losses                      int
	Wall                                    time.Duration
	Problems                                []string // one line per offending intent

	// Webhook events the card network sent, their delivery attempts, the
	// deliberate second deliveries, the deliveries answered with a replay,
	// and the events applied more than once (or never sent) or never.
	WebhookEvents, WebhookDeliveries, WebhookDuplicatesSent, WebhookReplays int
	WebhookAppliedTwice, WebhookMissing                                     int

	// IntentsPaidTwice is how many intents the payments table shows
	// completed more than once (a payment's reference is its intent), and
	// NaturalDuplicates how many natural keys idemgen reconcile lists for
	// the round: the store's own count of the same, from the digests the
	// records keep.
	IntentsPaidTwice, NaturalDuplicates int

	// With Config.Prometheus: the alerts that were pending or firing at any
	// time of the round, and the signals' totals over it.
	Alerts  []Alert
	Signals []Signal
}

// OK reports whether the run kept the promise.
func (r *Report) OK() bool {
	return r.Duplicates == 0 && r.Losses == 0 && r.OverRefunded == 0 && r.WebhookAppliedTwice == 0 && r.WebhookMissing == 0 &&
		len(r.Problems) == 0
}

// Table is the figures as text.
func (r *Report) Table() string {
	var b strings.Builder
	row := func(k string, v any) { fmt.Fprintf(&b, "  %-45s %v\n", k, v) }
	row("seed", r.Seed)
	row("intents (succeeded / declined)", fmt.Sprintf("%d (%d / %d)", r.Intents, r.Succeeded, r.Declined))
	row("refund intents (succeeded)", fmt.Sprintf("%d (%d)", r.Refunds, r.RefundsSucceeded))
	row("attempts", r.Attempts)
	row("replays received", r.Replays)
	row("409 in flight", r.Conflicts)
	row("5xx answers", r.Errors5xx)
	row("connection errors seen by clients", r.Resets)
	row("lease takeovers", r.Takeovers)
	row("fenced rollbacks", r.Fenced)
	row("resumed executions", r.Resumes)
	row("process kills (SIGKILL)", r.Kills)
	row("database connection faults", r.ConnFaults)
	row("PostgreSQL restarts", r.PGRestarts)
	failName := r.FailName
	if failName == "" {
		failName = "primary failovers (SIGKILL, promotion)"
	}
	row(failName, r.Failovers)
	row("longest pause between two answers", r.LongestPause.Round(time.Millisecond))
	row("card network slower than lease", r.SlowCard)
	row("responses dropped after commit", r.Drops)
	row("duplicates (must be 0)", r.Duplicates)
	row("losses (must be 0)", r.Losses)
	row("over-refunded payments (must be 0)", r.OverRefunded)
	row("webhook events (deliveries)", fmt.Sprintf("%d (%d)", r.WebhookEvents, r.WebhookDeliveries))
	row("webhook duplicates sent on purpose", r.WebhookDuplicatesSent)
	row("webhook deliveries replayed", r.WebhookReplays)
	row("webhook events applied twice (must be 0)", r.WebhookAppliedTwice)
	row("webhook events missing (must be 0)", r.WebhookMissing)
	row("intents paid twice / idemgen reconcile finds", fmt.Sprintf("%d / %d", r.IntentsPaidTwice, r.NaturalDuplicates))
	row("wall time", r.Wall.Round(time.Millisecond))
	if r.Signals != nil {
		b.WriteString("signals (Prometheus, over the round):\n")
		for _, s := range r.Signals {
			// Prometheus extrapolates increase() to the window: counts
			// are shown whole, times in seconds to a tenth.
			prec := 0
			if strings.Contains(s.Name, "(s") {
				prec = 1
			}
			row(s.Name, strconv.FormatFloat(s.Value, 'f', prec, 64))
		}
		b.WriteString("alerts pending or firing during the round:\n")
		if len(r.Alerts) == 0 {
			row("(none)", "")
		}
		for _, a := range r.Alerts {
			row(a.Name, strings.TrimPrefix(a.String(), a.Name+" "))
		}
	}
	return b.String()
}

// ShortRound is the chaos round of `make test` (TestShortRound), also run
// through PgBouncer by `make topology`: at least 200 intents with kills,
// connection faults, a PostgreSQL restart, a slow card network and dropped
// responses, while the card network delivers its signed webhooks through
// the same faults.
func ShortRound(paymentsBin, cardnetBin string) Config {
	return Config{
		Seed: 20261130, Clients: 8, RetryableClients: 1, Intents: 25,
		Think: 300 * time.Millisecond, Kills: 3, ConnFaults: 6, PGRestarts: 1, SlowCard: 1, DropRate: 0.03, RefundShare: 0.25,
		CardFailAfter: 0.05, FaultEvery: 1200 * time.Millisecond, Deadline: 150 * time.Second,
		Webhooks: true, WebhookDuplicates: 0.1, WebhookRefunds: 0.1,
		PaymentsBin: paymentsBin, CardnetBin: cardnetBin,
	}
}

// CheckShortRound reports a broken promise, or a short round that did not
// run as planned: fewer than 200 intents, a planned fault that did not
// happen, no refunds, or webhooks not applied exactly once (one event per
// succeeded payment and the network's own refunds, each applied once,
// every deliberate duplicate replayed).
func (r *Report) CheckShortRound() error {
	switch {
	case !r.OK():
		return fmt.Errorf("broken promise, seed %d:\n%v", r.Seed, r.Problems)
	case r.Intents < 200 || r.Kills != 3 || r.ConnFaults != 6 || r.PGRestarts != 1 || r.Refunds < 30 || r.RefundsSucceeded == 0:
		return fmt.Errorf("the round did not run as planned: %+v", r)
	case r.NaturalDuplicates != 0 || r.IntentsPaidTwice != 0:
		return fmt.Errorf("idemgen reconcile finds %d natural keys completed twice, and the payments table %d intents, in a round that kept its promise", r.NaturalDuplicates, r.IntentsPaidTwice)
	case r.WebhookEvents < r.Succeeded || r.WebhookDuplicatesSent == 0 || r.WebhookReplays < r.WebhookDuplicatesSent ||
		r.WebhookAppliedTwice != 0 || r.WebhookMissing != 0:
		return fmt.Errorf("webhooks: %d events for %d succeeded payments, %d duplicates sent, %d replays, %d applied twice, %d missing",
			r.WebhookEvents, r.Succeeded, r.WebhookDuplicatesSent, r.WebhookReplays, r.WebhookAppliedTwice, r.WebhookMissing)
	}
	return nil
}

// intent is one logical payment a client wants made exactly once.
type intent struct {
	id       string
	key      string // minted once, before the first attempt
	customer string
	amount   int64
	account  string

	attempts int
	status   int      // terminal status, 0 if none
	bodies   [][]byte // every terminal (201/402) body received
	last     string   // the last thing that happened, for reports
}

type run struct {
	cfg       Config
	began     time.Time // when the round started
	out       io.Writer
	cluster   *pglocal.Cluster
	dbURL     string
	dbName    string // the database the services connect to through the proxies
	proxies   []*dbProxy
	services  []*childproc.Process
	card      *childproc.Process
	front     *frontProxy
	sink      *outbox.Sink
	dir       string
	report    Report
	replays   atomic.Int64
	conflicts atomic.Int64
	errs5xx   atomic.Int64
	resets    atomic.Int64
	attempts  atomic.Int64
	answered  atomic.Int64 // intents and refund intents with a terminal answer
	// lastAnswer (unix nanoseconds) and longestPause track the longest time
	// without a terminal answer.
	lastAnswer, longestPause atomic.Int64
	// faults injected so far, for the progress line
	kills, connFaults, pgRestarts, slowCard, failovers atomic.Int64
	failoverNotes                                      []string          // under sayMu
	refunds                                            [][]*refundIntent // per client
	sayMu                                              sync.Mutex
	prom                                               *promServer
	upstream                                           string // where the fault proxies lead: the cluster, or its pooler
	secret                                             string // the card network's webhook signing secret
}

// newRand returns a generator for one purpose (the fault schedule, one
// client, the front proxy), so that goroutines' interleaving does not change
// what the seed decides.
func (r *run) newRand(purpose uint64) *rand.Rand {
	return rand.New(rand.NewPCG(r.cfg.Seed, purpose*0x9e3779b97f4a7c15+1))
}

func (r *run) say(format string, args ...any) {
	r.sayMu.Lock()
	defer r.sayMu.Unlock()
	fmt.Fprintf(r.out, format+"\n", args...)
}

// Run performs one chaos round and checks it. The error is for the harness
// failing to run; a broken promise is in the report (see Report.OK).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	r := &run{cfg: cfg, out: cfg.Out}
	r.report.Seed = cfg.Seed
	if r.out == nil {
		r.out = io.Discard
	}
	r.dir = cfg.Dir
	if r.dir != "" {
		if err := os.MkdirAll(r.dir, 0o755); err != nil {
			return nil, err
		}
	} else {
		d, err := os.MkdirTemp("", "chaos-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		r.dir = d
	}
	_, proxied := cfg.Database.(ProxiedDatabase)
	if cfg.Database != nil && (cfg.ConnFaults != 0 && !proxied || cfg.PGRestarts != 0) {
		return nil, errors.New("chaos: with an external Database, PGRestarts must be 0, and ConnFaults too unless it is a ProxiedDatabase (the services connect to it directly)")
	}
	if cfg.Database == nil && cfg.Failovers != 0 {
		return nil, errors.New("chaos: Failovers needs a Database to fail over")
	}
	if _, ok := cfg.Database.(ReplayHolder); cfg.LagBeforeFailover > 0 && !ok {
		return nil, errors.New("chaos: LagBeforeFailover needs a Database whose standby's replay can be held back (ReplayHolder)")
	}
	start := time.Now()
	r.began = start
	r.lastAnswer.Store(start.UnixNano())
	if err := r.up(ctx); err != nil {
		r.down()
		return nil, err
	}
	defer r.down()
	r.say("topology: PostgreSQL %s, %d services behind %s, card network %s; logs in %s",
		r.dbDescription(), len(r.services), r.front.addr, r.card.Addr(), r.dir)

	done := make(chan struct{})
	faultsDone := make(chan struct{})
	go func() { r.faults(done); close(faultsDone) }()
	go r.progress(done, start)
	intents := r.clients(faultsDone)
	close(done)
	<-faultsDone
	r.heal()
	r.say("all clients finished; checking")
	r.check(ctx, intents)
	if r.prom != nil {
		if err := r.signals(ctx, start); err != nil {
			return nil, err
		}
	}
	r.report.Wall = time.Since(start)
	return &r.report, nil
}

// dbDescription says what the services connect to.
func (r *run) dbDescription() string {
	switch {
	case r.cfg.Database != nil:
		return r.dbURL
	case r.cfg.Pooler != nil:
		return r.cluster.TCPAddr() + " behind a pooler at " + r.upstream
	}
	return r.cluster.TCPAddr()
}

func (r *run) up(ctx context.Context) error {
	var err error
	if r.cfg.Database != nil {
		r.dbURL = r.cfg.Database.URL()
		if pd, ok := r.cfg.Database.(ProxiedDatabase); ok {
			r.upstream, r.dbName = pd.Upstream()
			r.report.FailName = pd.FailName()
			if r.proxies, err = newDBProxies(3, r.upstream); err != nil {
				return err
			}
		}
	} else {
		r.dbName = "chaos"
		c, err := pglocal.Start(ctx, pglocal.Options{TCPPort: -1})
		if err != nil {
			return err
		}
		r.cluster = c
		if err := c.CreateDatabase(ctx, "chaos"); err != nil {
			return err
		}
		r.dbURL = c.URL("chaos")
		r.upstream = c.TCPAddr()
		if r.cfg.Pooler != nil {
			if r.upstream, err = r.cfg.Pooler.Start(ctx, c.TCPAddr()); err != nil {
				return err
			}
		}
		r.proxies, err = newDBProxies(3, r.upstream)
		if err != nil {
			return err
		}
	}
	r.sink = &outbox.Sink{Path: filepath.Join(r.dir, "mail.jsonl")}
	secret := make([]byte, 32)
	crand.Read(secret)
	r.secret = hex.EncodeToString(secret)
	// The services' addresses come first: the front proxy spreads over
	// them, and the card network delivers its webhooks through it.
	var addrs []string
	for range 3 {
		port, err := freePort()
		if err != nil {
			return err
		}
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", port))
	}
	r.front, err = newFrontProxy(addrs, r.cfg.DropRate, r.newRand(1))
	if err != nil {
		return err
	}
	cardArgs := []string{"-addr", "127.0.0.1:0", "-fail-after", strconv.FormatFloat(r.cfg.CardFailAfter, 'f', -1, 64)}
	if r.cfg.Webhooks {
		cardArgs = append(cardArgs, "-webhook-url", "http://"+r.front.addr+"/webhooks/cardnet",
			"-webhook-duplicate", strconv.FormatFloat(r.cfg.WebhookDuplicates, 'f', -1, 64),
			"-webhook-refund", strconv.FormatFloat(r.cfg.WebhookRefunds, 'f', -1, 64),
			"-webhook-min-wait", "200ms", "-webhook-max-wait", "2s")
	}
	r.card = &childproc.Process{Name: "cardnet", Bin: r.cfg.CardnetBin, Log: filepath.Join(r.dir, "cardnet.log"),
		Args: cardArgs, Env: []string{cardnet.SecretEnv + "=" + r.secret}}
	if err := r.card.Start(30 * time.Second); err != nil {
		return err
	}
	for i, addr := range addrs {
		args := []string{"-addr", addr, "-card-url", "http://" + r.card.Addr(), "-mail-sink", r.sink.Path}
		if r.cfg.UnsafeKeys {
			args = append(args, "-unsafe-fresh-charge-keys")
		}
		args = append(args, r.cfg.ServiceArgs...)
		s := &childproc.Process{Name: fmt.Sprintf("payments-%d", i), Bin: r.cfg.PaymentsBin, Args: args,
			Env: []string{"DATABASE_URL=" + r.serviceURL(i), cardnet.SecretEnv + "=" + r.secret},
			Log: filepath.Join(r.dir, fmt.Sprintf("payments-%d.log", i))}
		if err := s.Start(60 * time.Second); err != nil {
			return err
		}
		r.services = append(r.services, s)
	}
	if r.cfg.Prometheus != "" {
		if r.cfg.ScrapeEvery <= 0 {
			r.cfg.ScrapeEvery = 2 * time.Second
		}
		if r.prom, err = startPrometheus(ctx, r.cfg.Prometheus, r.cfg.Rules, r.dir, addrs, r.cfg.ScrapeEvery); err != nil {
			return err
		}
	}
	return nil
}

// serviceURL is the database URL of service i: through its fault proxy to
// the round's own cluster (or its pooler), or the external database's.
func (r *run) serviceURL(i int) string {
	params := "pool_max_conns=16&connect_timeout=5"
	if r.cfg.QueryExecMode != "" {
		params += "&default_query_exec_mode=" + r.cfg.QueryExecMode
	}
	if r.cfg.Database != nil && r.proxies == nil {
		sep := "?"
		if strings.Contains(r.dbURL, "?") {
			sep = "&"
		}
		return r.dbURL + sep + params
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&%s", r.proxies[i].addr, r.dbName, params)
}

func (r *run) down() {
	r.prom.stop()
	if r.front != nil {
		r.front.close()
	}
	for _, s := range r.services {
		s.Stop()
	}
	if r.card != nil {
		r.card.Stop()
	}
	for _, p := range r.proxies {
		p.close()
	}
	if r.cfg.Pooler != nil {
		r.cfg.Pooler.Stop()
	}
	if r.cluster != nil {
		r.cluster.Stop()
	}
}

// newIntent makes intent i of client c, from the client's own generator.
func (r *run) newIntent(c, i int, rng *rand.Rand) *intent {
	id := fmt.Sprintf("c%02d-i%04d", c, i)
	amount := int64(100 + rng.IntN(9000))
	if rng.IntN(20) == 0 {
		amount = cardnet.DeclinedAmount
	}
	return &intent{id: id, key: fmt.Sprintf("%s-%016x", id, rng.Uint64()), // minted once, before any attempt
		customer: id + "@chaos.test", amount: amount, account: fmt.Sprintf("acct_%d", c%4)}
}

// clients runs every client: each makes at least Config.Intents intents,
// and goes on making more while planned faults remain, so that every fault
// lands on live traffic. It returns every intent made.
func (r *run) clients(faultsDone <-chan struct{}) [][]*intent {
	deadline := time.Now().Add(r.cfg.Deadline)
	all := make([][]*intent, r.cfg.Clients)
	r.refunds = make([][]*refundIntent, r.cfg.Clients)
	var wg sync.WaitGroup
	for c := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			retryable := c < r.cfg.RetryableClients
			rng := r.newRand(uint64(100 + c))
			for i := 0; time.Now().Before(deadline); i++ {
				if i >= r.cfg.Intents {
					select {
					case <-faultsDone:
						return
					default:
					}
				}
				in := r.newIntent(c, i, rng)
				all[c] = append(all[c], in)
				r.pay(in, retryable, deadline)
				if in.status == 201 && rng.Float64() < r.cfg.RefundShare {
					r.refunds[c] = append(r.refunds[c], r.refundBurst(in, 3, deadline, rng)...)
				}
				if r.cfg.Think > 0 {
					time.Sleep(r.cfg.Think)
				}
			}
		}()
	}
	wg.Wait()
	return all
}

// pay pays one intent through the generated client, which retries under
// the intent's key (timeouts, resets, 5xx, 409 after Retry-After) until a
// terminal answer (201 or 402) or the deadline; then it asks once more:
// the answer must be the same bytes, replayed.
func (r *run) pay(in *intent, retryable bool, deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	c := r.client(retryable)
	auth := payer.Bearer(in.account)
	resp, res, err := c.CreatePayment(ctx, in.key, payer.Payment(in.amount, in.customer, in.id), auth)
	in.attempts += res.Attempts
	switch {
	case err != nil:
		in.last = "error: " + err.Error()
		return
	case resp.StatusCode() != 201 && resp.StatusCode() != 402:
		in.last = fmt.Sprintf("unexpected %d %s", resp.StatusCode(), bytes.TrimSpace(resp.Body))
		return
	}
	if res.Replayed {
		r.replays.Add(1)
	}
	in.status = resp.StatusCode()
	in.bodies = append(in.bodies, resp.Body)
	in.last = strconv.Itoa(in.status)
	r.answer()
	again, res, err := c.CreatePayment(ctx, in.key, payer.Payment(in.amount, in.customer, in.id), auth)
	in.attempts += res.Attempts
	if err != nil || (again.StatusCode() != 201 && again.StatusCode() != 402) {
		return
	}
	r.replays.Add(1)
	in.bodies = append(in.bodies, again.Body)
	if !res.Replayed {
		in.last = "verification answer not marked replayed"
	}
}

// answer counts a terminal answer, and the pause since the last one.
func (r *run) answer() {
	r.answered.Add(1)
	now := time.Now().UnixNano()
	pause := now - r.lastAnswer.Swap(now)
	for {
		longest := r.longestPause.Load()
		if pause <= longest || r.longestPause.CompareAndSwap(longest, pause) {
			return
		}
	}
}

// fault is a kind of fault the schedule injects; Config says how many of
// each.
type fault string

const (
	faultKill      fault = "kill"      // SIGKILL a service process, restart it after a pause
	faultConn      fault = "conn"      // a connFault on one service's database proxy
	faultPGRestart fault = "pgrestart" // restart PostgreSQL (fast shutdown)
	faultSlowCard  fault = "slowcard"  // the card network slower than the lease for a while
	faultFailover  fault = "failover"  // kill the external Database's primary
)

// faults runs the seeded fault schedule until done is closed or every
// planned fault happened.
func (r *run) faults(done chan struct{}) {
	type plan struct {
		kind fault
		left int
	}
	plans := []*plan{{faultKill, r.cfg.Kills}, {faultConn, r.cfg.ConnFaults}, {faultPGRestart, r.cfg.PGRestarts},
		{faultSlowCard, r.cfg.SlowCard}, {faultFailover, r.cfg.Failovers}}
	rng := r.newRand(2)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		var open []*plan
		total := 0
		for _, p := range plans {
			if p.left > 0 {
				open = append(open, p)
				total += p.left
			}
		}
		if total == 0 {
			return
		}
		wait := time.Duration(float64(r.cfg.FaultEvery) * (0.5 + rng.Float64()))
		select {
		case <-done:
			return
		case <-time.After(wait):
		}
		// Pick a fault in proportion to how many of each are left.
		n := rng.IntN(total)
		var p *plan
		for _, q := range open {
			if n < q.left {
				p = q
				break
			}
			n -= q.left
		}
		p.left--
		switch p.kind {
		case faultKill:
			s := r.services[rng.IntN(len(r.services))]
			s.Kill()
			r.kills.Add(1)
			pause := time.Duration(100+rng.IntN(1500)) * time.Millisecond
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(pause)
				r.restart(s)
			}()
		case faultConn:
			// A proxy already under a fault is left alone: faults queued on
			// one proxy would make one long outage of many short ones.
			var px *dbProxy
			for _, i := range rng.Perm(len(r.proxies)) {
				if r.proxies[i].busy.TryLock() {
					px = r.proxies[i]
					break
				}
			}
			if px == nil {
				p.left++ // every proxy is busy: try again at the next tick
				continue
			}
			kind := connReset
			closeAfter := time.Duration(200+rng.IntN(800)) * time.Millisecond
			dur := time.Duration(100+rng.IntN(700)) * time.Millisecond
			switch rng.IntN(20) {
			case 0, 1, 2, 3, 4, 5, 6:
				// A cut: nothing gets through, then the connections close.
				kind, dur = connCut, time.Duration(1000+rng.IntN(4000))*time.Millisecond
				closeAfter = dur
			case 7, 8, 9:
				// A stall longer than the lease (10s): another instance
				// takes over, and this one's late commits are fenced.
				kind, closeAfter = connLatency, time.Duration(11000+rng.IntN(3000))*time.Millisecond
				dur = closeAfter + time.Second
			}
			r.connFaults.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := px.fault(kind, closeAfter, dur); err != nil {
					r.say("fault: %v", err)
				}
			}()
		case faultPGRestart:
			r.say("restarting PostgreSQL (fast shutdown)")
			if err := r.cluster.Restart(context.Background()); err != nil {
				r.say("PostgreSQL restart failed: %v", err)
			}
			r.pgRestarts.Add(1)
		case faultFailover:
			held := r.holdReplay()
			r.say("failover: killing the primary")
			note, err := r.cfg.Database.Fail(context.Background())
			if err != nil {
				note = "failed: " + err.Error()
			}
			note = held + note
			r.say("failover: %s", note)
			r.failovers.Add(1)
			r.sayMu.Lock()
			r.failoverNotes = append(r.failoverNotes, note)
			r.sayMu.Unlock()
		case faultSlowCard:
			r.slowCard.Add(1)
			r.cardOptions(fmt.Sprintf(`{"latency":"12s","fail_after":%g}`, r.cfg.CardFailAfter))
			window := time.Duration(2000+rng.IntN(2000)) * time.Millisecond
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(window)
				r.cardOptions(fmt.Sprintf(`{"latency":"0s","fail_after":%g}`, r.cfg.CardFailAfter))
			}()
		}
	}
}

// holdReplay holds the standby's replay back for Config.LagBeforeFailover,
// then resumes it, and says so for the failover's note.
func (r *run) holdReplay() string {
	if r.cfg.LagBeforeFailover <= 0 {
		return ""
	}
	release, err := r.cfg.Database.(ReplayHolder).HoldReplay(context.Background())
	if err != nil {
		r.say("replication: %v", err)
		return "the standby's replay not held back: " + err.Error() + "; "
	}
	r.say("replication: the standby's replay held back for %s", r.cfg.LagBeforeFailover)
	time.Sleep(r.cfg.LagBeforeFailover)
	if err := release(context.Background()); err != nil {
		r.say("replication: resuming the standby's replay: %v", err)
	}
	return fmt.Sprintf("the standby's replay held back for %s, then resumed; ", r.cfg.LagBeforeFailover)
}

// progress prints, every Config.Progress until done is closed, how many
// intents were answered and how many faults were injected so far.
func (r *run) progress(done <-chan struct{}, start time.Time) {
	every := r.cfg.Progress
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		r.say("progress %s: %d intents answered (%d attempts); faults so far: %d kills, %d connection faults, %d PostgreSQL restarts, %d failovers, %d slow-card windows, %d dropped responses",
			time.Since(start).Round(time.Second), r.answered.Load(), r.attempts.Load(), r.kills.Load(), r.connFaults.Load(),
			r.pgRestarts.Load(), r.failovers.Load(), r.slowCard.Load(), r.front.dropped.Load())
	}
}

func (r *run) cardOptions(body string) {
	req, _ := http.NewRequest("PUT", "http://"+r.card.Addr()+"/admin/options", strings.NewReader(body))
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
	}
}

// restart starts a killed service again, retrying for up to two minutes
// while the database is unreachable (a restart, a cut or a stall may be
// under way).
func (r *run) restart(s *childproc.Process) {
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if err := s.Start(30 * time.Second); err == nil || errors.Is(err, childproc.ErrRunning) {
			return
		}
	}
	r.say("could not restart %s within 2 minutes; see %s", s.Name, s.Log)
}

// heal ends every fault so the last executions and the outbox can finish.
func (r *run) heal() {
	r.cardOptions(`{"latency":"0s"}`) // and no more failures
	for _, s := range r.services {
		if !s.Running() {
			r.restart(s)
		}
	}
}

// check fills the report: the run's own figures, then every intent judged
// against the truth the round left behind, then the refunds and the
// webhook events.
func (r *run) check(ctx context.Context, all [][]*intent) {
	r.figures()
	succeeded := 0
	for _, intents := range all {
		for _, in := range intents {
			if in.status == 201 {
				succeeded++
			}
		}
	}
	t := r.collectTruth(ctx, succeeded)
	for _, intents := range all {
		for _, in := range intents {
			r.judge(in, t)
		}
	}
	for _, byStatus := range t.payments {
		if byStatus["succeeded"]+byStatus["declined"] > 1 {
			r.report.IntentsPaidTwice++
		}
	}
	if n, err := r.reconcile(ctx); err != nil {
		r.report.Problems = append(r.report.Problems, "checker: reconcile: "+err.Error())
	} else {
		r.report.NaturalDuplicates = n
	}
	var refunds []*refundIntent
	for _, rs := range r.refunds {
		refunds = append(refunds, rs...)
	}
	if truth, err := collectRefunds(ctx, r.dbURL); err != nil {
		r.report.Problems = append(r.report.Problems, "checker: refunds: "+err.Error())
	} else {
		r.judgeRefunds(truth, refunds)
	}
	if r.cfg.Webhooks {
		r.checkWebhooks(ctx)
	}
	sort.Strings(r.report.Problems)
}

// figures copies the run's counters, and what the services' logs say of
// takeovers, fencing and resumes, into the report.
func (r *run) figures() {
	rep := &r.report
	rep.Attempts = int(r.attempts.Load())
	rep.Replays = int(r.replays.Load())
	rep.Conflicts = int(r.conflicts.Load())
	rep.Errors5xx = int(r.errs5xx.Load())
	rep.Resets = int(r.resets.Load())
	rep.Drops = int(r.front.dropped.Load())
	rep.Kills, rep.ConnFaults = int(r.kills.Load()), int(r.connFaults.Load())
	rep.PGRestarts, rep.SlowCard = int(r.pgRestarts.Load()), int(r.slowCard.Load())
	rep.Failovers, rep.FailoverNotes = int(r.failovers.Load()), r.failoverNotes
	rep.LongestPause = time.Duration(r.longestPause.Load())
	logs := filepath.Join(r.dir, "payments-*.log")
	rep.Takeovers = countLines(logs, `"event":"takeover"`)
	rep.Fenced = countLines(logs, `"event":"fenced"`)
	rep.Resumes = countLines(logs, `"event":"resume"`)
}

// truth is what the round left behind, per customer (each intent has a
// customer of its own): payments rows by status, card charges and emails.
type truth struct {
	payments map[string]map[string]int // customer -> status -> rows
	charges  map[string]int
	emails   map[string]int
}

// collectTruth reads the payments table, the card network's charges and
// the mail sink, once the outbox relays delivered the succeeded intents'
// receipts or stopped making progress. What it cannot read is a problem of
// the checker, in the report.
func (r *run) collectTruth(ctx context.Context, succeeded int) truth {
	rep := &r.report
	t := truth{payments: map[string]map[string]int{}, charges: map[string]int{}, emails: map[string]int{}}
	if conn, err := pgx.Connect(ctx, r.dbURL); err != nil {
		rep.Problems = append(rep.Problems, "checker: database: "+err.Error())
	} else {
		rows, err := conn.Query(ctx, `SELECT customer, status, count(*) FROM payments GROUP BY customer, status`)
		if err == nil {
			for rows.Next() {
				var c, s string
				var n int
				rows.Scan(&c, &s, &n)
				if t.payments[c] == nil {
					t.payments[c] = map[string]int{}
				}
				t.payments[c][s] = n
			}
			rows.Close()
		}
		conn.Close(ctx)
	}
	if charges, err := r.cardClient().Charges(ctx); err == nil {
		for _, c := range charges {
			t.charges[c.Customer]++
		}
	}
	// The relays deliver in the background: wait while they make progress.
	wait, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	mails, _ := r.sink.WaitMails(wait, succeeded, 15*time.Second)
	for _, m := range mails {
		t.emails[m.To]++
	}
	return t
}

// reconcile is how many natural keys idemgen reconcile finds completed more
// than once since the round began: the intents (payment references) paid
// under more than one idempotency key, as the store sees them.
func (r *run) reconcile(ctx context.Context) (int, error) {
	pool, err := pgxpool.New(ctx, r.dbURL)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	eng, err := idem.New(pool, idem.Options{})
	if err != nil {
		return 0, err
	}
	list, err := idemadmin.Reconcile(ctx, eng, r.began.Add(-time.Minute), 100000)
	return len(list), err
}

// harm is what a problem does to the promise.
type harm int

const (
	noHarm    harm = iota // a protocol detail, such as a replay not marked
	duplicate             // an effect happened more than once
	loss                  // an answered intent left no effect
)

// problem reports what is wrong with intent in, and counts its harm.
func (r *run) problem(in *intent, h harm, format string, args ...any) {
	rep := &r.report
	switch h {
	case duplicate:
		rep.Duplicates++
	case loss:
		rep.Losses++
	}
	rep.Problems = append(rep.Problems, fmt.Sprintf("%s key=%s account=%s amount=%d attempts=%d last=%q: %s",
		in.id, in.key, in.account, in.amount, in.attempts, in.last, fmt.Sprintf(format, args...)))
}

// judge counts intent in and compares it with the truth: one terminal
// answer, one payments row, the same body on every answer, and for a
// success one charge and one email (for a decline, none).
func (r *run) judge(in *intent, t truth) {
	rep := &r.report
	rep.Intents++
	p := t.payments[in.customer]
	total := p["succeeded"] + p["declined"] + p["pending"]
	switch {
	case in.status == 0:
		r.problem(in, loss, "no terminal answer (payments rows %v)", p)
		return
	case total > 1:
		r.problem(in, duplicate, "%d payment rows %v", total, p)
	case total == 0:
		r.problem(in, loss, "answered %d but no payment row", in.status)
	}
	for _, b := range in.bodies[1:] {
		if !bytes.Equal(b, in.bodies[0]) {
			r.problem(in, duplicate, "two different success bodies: %s / %s", in.bodies[0], b)
			break
		}
	}
	if in.last == "verification answer not marked replayed" {
		r.problem(in, noHarm, "the verification retry was not marked Idempotent-Replayed")
	}
	charges, emails := t.charges[in.customer], t.emails[in.customer]
	if in.status == 402 {
		rep.Declined++
		if charges != 0 || emails != 0 {
			r.problem(in, duplicate, "declined but %d charges and %d emails", charges, emails)
		}
		return
	}
	rep.Succeeded++
	switch {
	case charges > 1:
		r.problem(in, duplicate, "%d card charges", charges)
	case charges == 0:
		r.problem(in, loss, "no card charge")
	}
	switch {
	case emails > 1:
		r.problem(in, duplicate, "%d emails", emails)
	case emails == 0:
		r.problem(in, loss, "no email")
	}
}

// cardClient calls the card network's process.
func (r *run) cardClient() *cardnet.Client {
	return &cardnet.Client{URL: "http://" + r.card.Addr(), HTTP: &http.Client{Timeout: time.Minute}}
}
