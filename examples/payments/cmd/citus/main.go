// Command citus runs idemgen on a Citus cluster (a coordinator and two
// workers, started from this machine's PostgreSQL binaries with Citus
// installed into them) and prints its figures; `make citus` runs it.
//
//   - suite: the engine's protocol suite in every claim mode and the
//     black-box conformance cases (echo, net/http, gin) with every test's
//     records table distributed (IDEMGEN_PG_CITUS=1), with the race
//     detector;
//   - chaos: a chaos round of the payments example, the records table
//     distributed by id and the business tables Citus tables on the
//     coordinator, with process kills, connection faults and one worker
//     SIGKILLed mid-round and restarted; the same "must be 0" figures as
//     `make chaos`;
//   - worker-down: one worker down for a while, in every claim mode:
//     requests whose record lives there answer 503 with Retry-After,
//     requests for the other worker go on, and once it is back every key
//     completes exactly once;
//   - throughput: single-phase and three-phase requests at 16 clients on
//     a durable Citus cluster against a durable single PostgreSQL, the
//     same benchmark binary interleaved, and Citus' two-phase commits per
//     request.
//
// Citus is installed from CITUS_SRC when it is missing (its install.sh);
// without it the command says how and exits 2. It exits 1 when a round
// broke a promise or a test failed.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/examples/payments/chaos"
	"github.com/idemgen/idemgen/internal/citus"
	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/internal/topology"
	"github.com/idemgen/idemgen/pglocal"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

type options struct {
	repo, payments, cardnet, src, rounds string
	race                                 bool
	benchRounds                          int
	benchTime                            string
	down                                 time.Duration
	scaleWorkers                         string
	cpuQuota                             float64
}

func main() {
	var o options
	flag.StringVar(&o.repo, "repo", "..", "the repository's root, whose tests the suite round runs")
	flag.StringVar(&o.payments, "payments", "bin/payments", "the payments binary")
	flag.StringVar(&o.cardnet, "cardnet", "bin/cardnet", "the cardnet binary")
	flag.StringVar(&o.src, "citus-src", os.Getenv("CITUS_SRC"), "where Citus' install.sh is, to install Citus when it is missing (default $CITUS_SRC)")
	flag.StringVar(&o.rounds, "rounds", "suite,suite-placement,chaos,chaos-placement,chaos-placement-coordinator,worker-down,worker-down-placement,throughput,throughput-placement", "which rounds to run, comma-separated")
	flag.BoolVar(&o.race, "race", true, "run the suite round with the race detector")
	flag.IntVar(&o.benchRounds, "bench-rounds", 3, "interleaved rounds of the throughput round")
	flag.StringVar(&o.benchTime, "benchtime", "4000x", "requests per case and round of the throughput round (go test -benchtime)")
	flag.DurationVar(&o.down, "down", 6*time.Second, "how long the worker-down round keeps its worker down")
	flag.StringVar(&o.scaleWorkers, "scale-workers", "1,2,4", "the scale round's cluster sizes, in workers")
	flag.Float64Var(&o.cpuQuota, "cpu-quota", 0.3, "the scale round's CPU quota of each worker's PostgreSQL, in CPUs")
	flag.Parse()
	os.Exit(run(o))
}

// errHarness marks a failure of the harness, not of idemgen.
var errHarness = errors.New("harness")

func harness(err error) error { return fmt.Errorf("%w: %w", errHarness, err) }

func run(o options) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := citus.Ensure(ctx, o.src, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	dir, err := os.MkdirTemp("", "idemgen-citus-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	keep := false // the logs of a round that failed
	defer func() {
		if keep {
			fmt.Printf("logs kept in %s\n", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()
	os.Chmod(dir, 0o755)
	type result struct {
		name string
		err  error
	}
	var results []result
	for _, name := range strings.Split(o.rounds, ",") {
		var out string
		var err error
		started := time.Now()
		fmt.Fprintf(os.Stderr, "== %s: starting ==\n", name)
		switch name {
		case "suite":
			out, err = suiteRound(ctx, o, false)
		case "suite-placement":
			out, err = suiteRound(ctx, o, true)
		case "chaos":
			out, err = chaosRound(ctx, o, filepath.Join(dir, name), false, false)
		case "chaos-placement":
			out, err = chaosRound(ctx, o, filepath.Join(dir, name), true, false)
		case "chaos-placement-coordinator":
			out, err = chaosRound(ctx, o, filepath.Join(dir, name), true, true)
		case "worker-down":
			out, err = workerDownRound(ctx, o, false)
		case "worker-down-placement":
			out, err = workerDownRound(ctx, o, true)
		case "throughput":
			out, err = throughputRound(ctx, o, false)
		case "throughput-placement":
			out, err = throughputRound(ctx, o, true)
		case "scale":
			out, err = scaleRound(ctx, o)
		default:
			out, err = "", harness(fmt.Errorf("unknown round %q", name))
		}
		fmt.Printf("\n== %s (%s) ==\n%s", name, time.Since(started).Round(time.Second), out)
		if err != nil {
			fmt.Printf("FAILED: %v\n", err)
		}
		results = append(results, result{name, err})
		keep = keep || err != nil
		if ctx.Err() != nil {
			break
		}
	}
	fmt.Println("\n== summary ==")
	code := 0
	for _, r := range results {
		switch {
		case r.err == nil:
			fmt.Printf("  %-12s ok\n", r.name)
		case errors.Is(r.err, errHarness):
			fmt.Printf("  %-12s HARNESS: %s\n", r.name, firstLine(r.err.Error()))
			code = max(code, 2)
		default:
			fmt.Printf("  %-12s FAILED: %s\n", r.name, firstLine(r.err.Error()))
			code = 1
		}
	}
	return code
}

func firstLine(s string) string { return strings.SplitN(s, "\n", 2)[0] }

// startCluster starts a Citus cluster and says what it is on stderr.
func startCluster(ctx context.Context, durable bool, settings map[string]string) (*citus.Cluster, error) {
	cl, err := citus.Start(ctx, citus.Options{Workers: 2, Durable: durable, Settings: settings})
	if err != nil {
		return nil, harness(err)
	}
	fmt.Fprintf(os.Stderr, "citus: coordinator %s, workers %s and %s (durable: %t)\n",
		cl.Coordinator.TCPAddr(), cl.Workers[0].TCPAddr(), cl.Workers[1].TCPAddr(), durable)
	return cl, nil
}

// citusVersion is the cluster's Citus version.
func citusVersion(ctx context.Context, url string) string {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "?"
	}
	defer conn.Close(ctx)
	var v string
	conn.QueryRow(ctx, `SELECT extversion FROM pg_extension WHERE extname = 'citus'`).Scan(&v)
	return v
}

// suitePackages are the tests the suite round runs on Citus, by module
// directory: the engine's protocol suite (every test, each in every claim
// mode where it applies), the black-box conformance cases and the
// operator's commands.
var suitePackages = []struct {
	Dir  string
	Args []string
	Pkgs int
}{
	{".", []string{"./runtime/idem"}, 1},
	{".", []string{"-run", "^TestConformance$", "./runtime/idemecho", "./runtime/idemstd"}, 2},
	{"runtime/idemgin", []string{"-run", "^TestConformance$", "."}, 1},
	// The operator's commands (migrate distribute, inspect, abandoned,
	// prune, resolve) on a distributed table.
	{".", []string{"-run", "^(TestStoreCommands|TestOperatorCommandsTakeAnOperationID)$", "./cmd/idemgen"}, 1},
}

// suiteRound runs suitePackages on a Citus cluster, every test's records
// table distributed by id, or with placement by a bigint tenant,
// co-located with a table of the test's (dbtest.PlacementEnv).
func suiteRound(ctx context.Context, o options, placement bool) (string, error) {
	cl, err := startCluster(ctx, false, nil)
	if err != nil {
		return "", err
	}
	defer cl.Stop()
	var b strings.Builder
	layout, env := "distributed by id", []string(nil)
	if placement {
		layout, env = "distributed by placement (a bigint tenant), co-located with a tenants table", []string{dbtest.PlacementEnv + "=bigint"}
	}
	fmt.Fprintf(&b, "Citus %s: a coordinator and %d workers; every test's records table %s\n",
		citusVersion(ctx, cl.URL()), len(cl.Workers), layout)
	var failed error
	for _, p := range suitePackages {
		// -v, for the reasons of the tests that do not apply on Citus.
		args := []string{"test", "-count=1", "-v", "-timeout", "30m"}
		if o.race {
			args = append(args, "-race")
		}
		cmd := exec.CommandContext(ctx, goCommand(), append(args, p.Args...)...)
		cmd.Dir = filepath.Join(o.repo, p.Dir)
		cmd.Env = append(append(os.Environ(), "DATABASE_URL="+cl.URL(), pglocal.CitusEnv+"=1"), env...)
		out, err := cmd.CombinedOutput()
		res, nfail := topology.ParseGoTest(string(out))
		b.WriteString(topology.Summary(res))
		if err != nil || nfail > 0 || len(res) != p.Pkgs {
			failed = errors.Join(failed, fmt.Errorf("%s: %d failed (%v):\n%s", strings.Join(p.Args, " "), nfail, err, failures(out, 60)))
		}
		skips := skipped(out)
		for _, s := range skips {
			fmt.Fprintf(&b, "    not on Citus: %s\n", s)
		}
	}
	return b.String(), failed
}

var skipLine = regexp.MustCompile(`(?m)^\s+\S+_test\.go:\d+: does not apply on Citus: (.*)$`)

// skipped lists, once each, why tests did not apply on Citus.
func skipped(out []byte) []string {
	var why []string
	for _, m := range skipLine.FindAllSubmatch(out, -1) {
		if s := string(m[1]); !slices.Contains(why, s) {
			why = append(why, s)
		}
	}
	return why
}

var failureLine = regexp.MustCompile(`^\s*(--- FAIL|\S+_test\.go:\d+: |panic:|FAIL)`)

// failures is the first n lines of a verbose go test's output that say
// what failed, or its last n lines when none does.
func failures(out []byte, n int) string {
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if failureLine.MatchString(l) && !strings.Contains(l, "does not apply on Citus") && len(keep) < n {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		return lastLines(out, n)
	}
	return strings.Join(keep, "\n")
}

func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// goCommand is the go command that runs the tests: $GO, or go.
func goCommand() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// prepare migrates the engine's tables into schema, distributes the
// records table, and makes each of tables a Citus table on the coordinator
// (with the tables its foreign keys reach): a plain table there would
// commit apart from the records on the workers (docs/scaling.md).
func prepare(ctx context.Context, pool *pgxpool.Pool, schema string, tables ...string) error {
	m := idemmigrate.New(pool, schema)
	if _, err := m.Up(ctx); err != nil {
		return err
	}
	if _, err := m.Distribute(ctx); err != nil {
		return err
	}
	for _, t := range tables {
		_, err := pool.Exec(ctx, `SELECT citus_add_local_table_to_metadata($1, cascade_via_foreign_keys => true)
WHERE NOT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = $1::regclass)`, t)
		if err != nil {
			return fmt.Errorf("making %s a Citus table: %w", t, err)
		}
	}
	return nil
}

// citusDB is the cluster as the chaos round's external database, whose
// "failover" fault kills a worker, or the coordinator.
type citusDB struct {
	cl          *citus.Cluster
	down        time.Duration
	coordinator bool // Fail kills the coordinator
	mu          sync.Mutex
	next        int
}

func (d *citusDB) URL() string                   { return d.cl.URL() }
func (d *citusDB) Upstream() (addr, name string) { return d.cl.Coordinator.TCPAddr(), citus.DB }
func (d *citusDB) FailName() string {
	if d.coordinator {
		return "Citus coordinator SIGKILLed and restarted"
	}
	return "Citus workers SIGKILLed and restarted"
}

func (d *citusDB) Fail(ctx context.Context) (string, error) {
	if d.coordinator {
		// Its two-phase commits in flight are left to Citus' recovery:
		// the coordinator's maintenance daemon commits or aborts each
		// prepared transaction on the workers by its own commit record.
		addr := d.cl.Coordinator.TCPAddr()
		d.cl.Coordinator.Kill()
		time.Sleep(d.down)
		if err := d.cl.Coordinator.Restart(ctx); err != nil {
			return "", fmt.Errorf("restarting the coordinator %s: %w", addr, err)
		}
		return fmt.Sprintf("coordinator %s SIGKILLed, restarted %s later", addr, d.down), nil
	}
	d.mu.Lock()
	i := d.next
	d.next = (d.next + 1) % len(d.cl.Workers)
	d.mu.Unlock()
	addr := d.cl.Workers[i].TCPAddr()
	d.cl.KillWorker(i)
	time.Sleep(d.down)
	if err := d.cl.RestartWorker(ctx, i); err != nil {
		return "", fmt.Errorf("restarting worker %s: %w", addr, err)
	}
	return fmt.Sprintf("worker %s SIGKILLed, restarted %s later", addr, d.down), nil
}

// businessTables are the payments example's tables, the first the one
// the others are co-located with when distributed by account.
var businessTables = []string{"payments", "refunds", "outbox", "card_events", "orders"}

// preparePlaced lays the payments example out as a Citus user lays out a
// multi-tenant service: its tables distributed by account and co-located,
// and the records placed by account with them (api.yaml's placement).
func preparePlaced(ctx context.Context, pool *pgxpool.Pool) error {
	m := idemmigrate.New(pool, idem.DefaultSchema)
	if _, err := m.Up(ctx); err != nil {
		return err
	}
	for i, t := range businessTables {
		colocate := businessTables[0]
		if i == 0 {
			colocate = "default"
		}
		_, err := pool.Exec(ctx, `SELECT create_distributed_table($1, 'account', colocate_with => $2)
WHERE NOT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = $1::regclass)`, t, colocate)
		if err != nil {
			return fmt.Errorf("distributing %s by account: %w", t, err)
		}
	}
	_, err := m.DistributeBy(ctx, idemmigrate.DistributeOptions{ColocateWith: businessTables[0]})
	return err
}

// chaosRound runs the payments example's chaos round on a cluster: its
// tables Citus tables on the coordinator and the records distributed by id,
// or (placed) everything distributed by account and co-located; the
// round's "failover" fault kills a worker, or (coordinator) the
// coordinator.
func chaosRound(ctx context.Context, o options, dir string, placed, coordinator bool) (string, error) {
	cl, err := startCluster(ctx, false, nil)
	if err != nil {
		return "", err
	}
	defer cl.Stop()
	pool, err := pgxpool.New(ctx, cl.URL())
	if err != nil {
		return "", harness(err)
	}
	err = api.Migrate(ctx, pool)
	switch {
	case err == nil && placed:
		err = preparePlaced(ctx, pool)
	case err == nil:
		err = prepare(ctx, pool, idem.DefaultSchema, "payments", "orders")
	}
	pool.Close()
	if err != nil {
		return "", harness(err)
	}
	cfg := chaos.ShortRound(o.payments, o.cardnet)
	cfg.Seed = 20261204
	cfg.Clients, cfg.Intents = 10, 30
	cfg.Kills, cfg.ConnFaults, cfg.PGRestarts, cfg.Failovers = 4, 8, 0, 1
	cfg.Deadline = 5 * time.Minute
	cfg.Database = &citusDB{cl: cl, down: 2 * time.Second, coordinator: coordinator}
	cfg.Out, cfg.Dir = os.Stderr, dir
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		return "", harness(err)
	}
	var b strings.Builder
	layout := "records distributed by id, business tables Citus tables on the coordinator"
	if placed {
		layout = "business tables distributed by account and co-located, records placed by account with them"
	}
	fmt.Fprintf(&b, "payments on Citus %s: %s\n%s", citusVersion(ctx, cl.URL()), layout, rep.Table())
	switch {
	case !rep.OK():
		fmt.Fprintf(&b, "the services' errors, first of each:\n%s", serviceErrors(dir, 8))
		return b.String(), fmt.Errorf("broken promise, seed %d: %d problems, the first: %v", rep.Seed, len(rep.Problems), rep.Problems[:min(3, len(rep.Problems))])
	case rep.Failovers != 1 || rep.Kills != cfg.Kills || rep.ConnFaults != cfg.ConnFaults || rep.Intents < 250 ||
		rep.WebhookEvents < rep.Succeeded || rep.RefundsSucceeded == 0:
		return b.String(), fmt.Errorf("the round did not run as planned: %d node kills, %d process kills, %d connection faults, %d intents, %d webhook events for %d succeeded, %d refunds succeeded",
			rep.Failovers, rep.Kills, rep.ConnFaults, rep.Intents, rep.WebhookEvents, rep.Succeeded, rep.RefundsSucceeded)
	}
	return b.String(), nil
}

var errLine = regexp.MustCompile(`"level":"(ERROR|WARN)".*?"msg":"([^"]*)".*?(?:"sqlstate":"([0-9A-Z]{5})")?.*?(?:"message":"([^"]*)")?`)

// serviceErrors is the first n distinct ERROR and WARN lines (message,
// SQLSTATE) of the payments services' logs in dir.
func serviceErrors(dir string, n int) string {
	logs, _ := filepath.Glob(filepath.Join(dir, "payments-*.log"))
	seen := map[string]bool{}
	var out []string
	for _, f := range logs {
		data, _ := os.ReadFile(f)
		for _, l := range strings.Split(string(data), "\n") {
			m := errLine.FindStringSubmatch(l)
			if m == nil || len(out) >= n {
				continue
			}
			key := m[2] + " " + m[3] + " " + m[4]
			if !seen[key] {
				seen[key] = true
				out = append(out, "  "+firstLine(l)[:min(len(l), 400)])
			}
		}
	}
	if len(out) == 0 {
		return "  (none)\n"
	}
	return strings.Join(out, "\n") + "\n"
}

// outcome is what one request was answered: its HTTP status, and whether
// it was a replay or carried a Retry-After.
type outcome struct {
	status     int
	replayed   bool
	retryAfter bool
}

func answer(out *idem.Outcome, err error) outcome {
	if err == nil {
		return outcome{status: out.Response.Status, replayed: out.Replayed}
	}
	var ie *idemtype.Error
	if errors.As(err, &ie) {
		return outcome{status: ie.Status(), retryAfter: ie.RetryAfter > 0}
	}
	return outcome{status: http.StatusInternalServerError}
}

// With placement, the layout of "Placement by tenant" entered at a worker:
// the business table keyed and distributed by tenant, the records placed
// by it and co-located, and the service connected to the live worker, not
// the coordinator (any node an entry): only the tenants placed on the
// down worker are refused.
func workerDownRound(ctx context.Context, o options, placement bool) (string, error) {
	cl, err := startCluster(ctx, false, nil)
	if err != nil {
		return "", err
	}
	defer cl.Stop()
	pool, err := pgxpool.New(ctx, cl.URL()+"&pool_max_conns=16")
	if err != nil {
		return "", harness(err)
	}
	defer pool.Close()
	const schema = "wdown"
	var b strings.Builder
	service := pool
	if placement {
		if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS public.wdown_items (tenant bigint, key text, n int NOT NULL DEFAULT 1, PRIMARY KEY (tenant, key))`); err != nil {
			return "", harness(err)
		}
		if _, err := pool.Exec(ctx, `SELECT create_distributed_table('public.wdown_items', 'tenant')`); err != nil {
			return "", harness(err)
		}
		m := idemmigrate.New(pool, schema)
		if _, err := m.Up(ctx); err != nil {
			return "", harness(err)
		}
		if _, err := m.DistributeBy(ctx, idemmigrate.DistributeOptions{ColocateWith: "public.wdown_items"}); err != nil {
			return "", harness(err)
		}
		// The service enters at the worker that stays up.
		if service, err = pgxpool.New(ctx, cl.Workers[0].URL(citus.DB)+"&pool_max_conns=16"); err != nil {
			return "", harness(err)
		}
		defer service.Close()
		fmt.Fprintf(&b, "Citus %s; worker %s down for %s; records and the business table placed by tenant, co-located; the service connected to worker %s\n",
			citusVersion(ctx, cl.URL()), cl.Workers[1].TCPAddr(), o.down, cl.Workers[0].TCPAddr())
	} else {
		if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS public.wdown_items (key text PRIMARY KEY, n int NOT NULL DEFAULT 1)`); err != nil {
			return "", harness(err)
		}
		if err := prepare(ctx, pool, schema, "public.wdown_items"); err != nil {
			return "", harness(err)
		}
		fmt.Fprintf(&b, "Citus %s; worker %s down for %s; the business table a Citus table on the coordinator\n",
			citusVersion(ctx, cl.URL()), cl.Workers[1].TCPAddr(), o.down)
	}
	var failed error
	for _, mode := range []idem.ClaimMode{idem.ClaimLast, idem.ClaimFirst, idem.ClaimSeparate} {
		res, err := workerDown(ctx, cl, service, schema, mode, o.down, placement)
		if err != nil && errors.Is(err, errHarness) {
			return b.String(), err
		}
		b.WriteString(res)
		failed = errors.Join(failed, err)
	}
	return b.String(), failed
}

// workerDown runs one claim mode's part of the worker-down round.
func workerDown(ctx context.Context, cl *citus.Cluster, pool *pgxpool.Pool, schema string, mode idem.ClaimMode, down time.Duration, placement bool) (string, error) {
	var logs bytes.Buffer
	var logMu sync.Mutex
	eng, err := idem.New(pool, idem.Options{Schema: schema, Claim: mode, ReplayCacheBytes: -1,
		Logger: slog.New(slog.NewJSONHandler(lockedWriter{&logs, &logMu}, nil))})
	if err != nil {
		return "", harness(err)
	}
	op := &idem.Operation{ID: "wdown-" + string(mode), Policy: idem.Policy{Lease: 30 * time.Second}}
	phases := func(key string) []idem.Phase[struct{}] {
		return []idem.Phase[struct{}]{{Name: "only", Final: func(ctx context.Context, tx pgx.Tx, _ *struct{}) (*idem.Response, error) {
			insert, args := `INSERT INTO public.wdown_items (key) VALUES ($1)`, []any{key}
			if placement {
				insert, args = `INSERT INTO public.wdown_items (tenant, key) VALUES ($2, $1)`, []any{key, idem.ExecutionFrom(ctx).Placement}
			}
			if _, err := tx.Exec(ctx, insert, args...); err != nil {
				return nil, err
			}
			return &idem.Response{Status: 201, Body: []byte(key)}, nil
		}}}
	}
	tenant := map[string]string{} // with placement: each key's
	call := func(key string) outcome {
		req := idem.KeyedRequest{Scope: "t", Key: key, Fingerprint: []byte(key), Placement: tenant[key]}
		out, err := idem.Run(ctx, eng, op, req, phases(key))
		return answer(out, err)
	}
	// Keys, and the worker each one's record lives on: its record's
	// shard's, or its tenant's.
	var keys []string
	on := map[string]int{}
	for i := range 24 {
		key := fmt.Sprintf("%s-%d", mode, i)
		table, value := schema+".records", ""
		if placement {
			table, value = "public.wdown_items", strconv.Itoa(i+1)
			tenant[key] = value
		} else if err := pool.QueryRow(ctx, `SELECT `+schema+`.record_id($1, $2, $3)::text`, op.ID, "t", key).Scan(&value); err != nil {
			return "", harness(err)
		}
		w, err := cl.WorkerOf(ctx, table, value)
		if err != nil {
			return "", harness(err)
		}
		keys = append(keys, key)
		on[key] = w
	}
	cl.KillWorker(1)
	// While it is down: every key, round after round.
	counts := map[string]int{} // "worker/status/retry-after" -> requests
	var wrong []string
	for deadline := time.Now().Add(down); time.Now().Before(deadline); {
		for _, key := range keys {
			a := call(key)
			counts[fmt.Sprintf("worker %d: %d%s", on[key], a.status, map[bool]string{true: " with Retry-After"}[a.retryAfter])]++
			switch {
			case on[key] == 1 && (a.status != 503 || !a.retryAfter):
				wrong = append(wrong, fmt.Sprintf("%s (on the down worker) answered %d, retry-after %t", key, a.status, a.retryAfter))
			case on[key] == 0 && a.status != 201:
				wrong = append(wrong, fmt.Sprintf("%s (on the live worker) answered %d", key, a.status))
			}
		}
	}
	if err := cl.RestartWorker(ctx, 1); err != nil {
		return "", harness(err)
	}
	// Back: every key answers its one execution's response.
	var after []outcome
	for _, key := range keys {
		var a outcome
		for range 20 { // a retry while the worker's connections come back
			if a = call(key); a.status != 503 {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		after = append(after, a)
		if a.status != 201 {
			wrong = append(wrong, fmt.Sprintf("%s answered %d once the worker was back", key, a.status))
		}
	}
	var rows, dup int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE n > 1) FROM public.wdown_items WHERE key LIKE $1`,
		string(mode)+"-%").Scan(&rows, &dup); err != nil {
		return "", harness(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "claim mode %s:\n", mode)
	names := make([]string, 0, len(counts))
	for k := range counts {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(&b, "  while down, %-38s %d\n", k, counts[k])
	}
	replayed := 0
	for _, a := range after {
		if a.replayed {
			replayed++
		}
	}
	fmt.Fprintf(&b, "  once back: %d keys answered 201 (%d replayed)\n", len(keys)-len(wrong), replayed)
	fmt.Fprintf(&b, "  %-48s %d\n", "keys lost (must be 0)", len(keys)-rows)
	fmt.Fprintf(&b, "  %-48s %d\n", "applied twice (must be 0)", dup)
	fmt.Fprintf(&b, "  %-48s %d\n", "wrong answers (must be 0)", len(wrong))
	logMu.Lock()
	states := sqlstates(logs.String())
	logMu.Unlock()
	fmt.Fprintf(&b, "  store errors logged, by SQLSTATE: %s\n", states)
	if rows != len(keys) || dup != 0 || len(wrong) > 0 {
		return b.String(), fmt.Errorf("claim mode %s: %d of %d keys stored, %d applied twice, wrong answers: %v", mode, rows, len(keys), dup, wrong)
	}
	return b.String(), nil
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

var sqlstateField = regexp.MustCompile(`"sqlstate":"([0-9A-Z]{5})"`)

// sqlstates counts the log lines' SQLSTATEs.
func sqlstates(logs string) string {
	n := map[string]int{}
	for _, m := range sqlstateField.FindAllStringSubmatch(logs, -1) {
		n[m[1]]++
	}
	if len(n) == 0 {
		return "none"
	}
	var parts []string
	for k, v := range n {
		parts = append(parts, fmt.Sprintf("%s x%d", k, v))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// throughputRound measures the benchmark's single-phase and three-phase
// requests (and the plain transaction they add to) at 16 clients, on a
// durable single PostgreSQL and on a durable Citus cluster, in interleaved
// rounds of the same test binary.
//
// With placement, both run the benchmark's multi-tenant layout
// (dbtest.PlacementEnv=bigint): the business table keyed by (tenant, id),
// each request's tenant in a header, and on Citus the business table and
// the records distributed by tenant and co-located.
func throughputRound(ctx context.Context, o options, placement bool) (string, error) {
	// Two-phase commits stay in pg_dist_transaction until Citus' recovery
	// sweeps them: off, so that the round can count them.
	cl, err := startCluster(ctx, true, map[string]string{"citus.recover_2pc_interval": "-1"})
	if err != nil {
		return "", err
	}
	defer cl.Stop()
	pg, err := pglocal.Start(ctx, pglocal.Options{Durable: true})
	if err != nil {
		return "", harness(err)
	}
	defer pg.Stop()
	bin, remove, err := buildBench(ctx, o)
	if err != nil {
		return "", harness(err)
	}
	defer remove()
	cases := []string{"plain-tx", "single-phase", "three-phase"}
	type target struct {
		name string
		env  []string
	}
	targets := []target{
		{"PostgreSQL", []string{"DATABASE_URL=" + pg.URL("postgres")}},
		{"Citus", []string{"DATABASE_URL=" + cl.URL(), pglocal.CitusEnv + "=1"}},
	}
	layout := "records by id, the business table by its id"
	if placement {
		layout = "records and the business table by tenant, co-located"
		// Any node an entry: the service's instances on the workers, one
		// each, the schema made on the coordinator.
		targets = append(targets, target{"Citus via workers", []string{"DATABASE_URL=" + cl.URL(), pglocal.CitusEnv + "=1", "IDEMGEN_BENCH_ENTRIES=" + strings.Join(workerURLs(cl), ",")}})
		for i := range targets {
			targets[i].env = append(targets[i].env, dbtest.PlacementEnv+"=bigint")
		}
	}
	reqs := map[string][]float64{} // target/case -> req/s per round
	var citusRequests float64
	twoPC := func() (int, error) {
		// A two-phase commit is logged on the node whose session began it
		// (citus_<group>_<pid>_<txn>_<conn>), the coordinator or, for a
		// service entering at a worker, that worker: every node's, each
		// transaction once however many workers it prepared on.
		total := 0
		for _, url := range append([]string{cl.URL()}, workerURLs(cl)...) {
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				return 0, err
			}
			var n int
			err = conn.QueryRow(ctx, `SELECT count(DISTINCT split_part(gid, '_', 2) || '_' || split_part(gid, '_', 3) || '_' || split_part(gid, '_', 4)) FROM pg_dist_transaction`).Scan(&n)
			conn.Close(ctx)
			if err != nil {
				return 0, err
			}
			total += n
		}
		return total, nil
	}
	before, err := twoPC()
	if err != nil {
		return "", harness(err)
	}
	for round := range o.benchRounds {
		order := slices.Clone(targets)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, t := range order {
			fmt.Fprintf(os.Stderr, "throughput: round %d of %d, %s\n", round+1, o.benchRounds, t.name)
			got, err := benchOnce(ctx, o, bin, t.env, cases)
			if err != nil {
				return "", harness(fmt.Errorf("the benchmark on %s: %w", t.name, err))
			}
			for c, r := range got {
				reqs[t.name+"/"+c] = append(reqs[t.name+"/"+c], r.perSecond)
				if t.name != "PostgreSQL" && c != "plain-tx" {
					citusRequests += r.requests + 50 // and the calibration's, on the counted service
				}
			}
		}
	}
	after, err := twoPC()
	if err != nil {
		return "", harness(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "16 clients, %d interleaved rounds of %s requests per case, durable nodes; Citus %s (%s)\n",
		o.benchRounds, o.benchTime, citusVersion(ctx, cl.URL()), layout)
	fmt.Fprintf(&b, "  %-14s %14s", "case", "PostgreSQL r/s")
	for _, t := range targets[1:] {
		fmt.Fprintf(&b, " %18s %6s", t.name+" r/s", "ratio")
	}
	b.WriteString("\n")
	for _, c := range cases {
		p := median(reqs["PostgreSQL/"+c])
		fmt.Fprintf(&b, "  %-14s %14.0f", c, p)
		for _, t := range targets[1:] {
			q := median(reqs[t.name+"/"+c])
			if p == 0 || q == 0 {
				return b.String(), harness(fmt.Errorf("no figures for %s on %s", c, t.name))
			}
			fmt.Fprintf(&b, " %18.0f %6.2f", q, q/p)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "  two-phase commits per idempotent request on Citus: %.2f (%d over %.0f requests)\n",
		float64(after-before)/citusRequests, after-before, citusRequests)
	fmt.Fprintf(&b, "  (medians of the rounds; the plain transaction's row shows what Citus costs a request without idemgen)\n")
	return b.String(), nil
}

// benchLine is a line of BenchmarkEngine's output at 16 clients: the case,
// its requests, its requests/s.
var benchLine = regexp.MustCompile(`^BenchmarkEngine/c16/([a-z-]+)(?:#\d+)?-\d+\s+(\d+)\s.*?\s([0-9.]+) req/s`)

// benchResult is one case's figures in one run of the benchmark.
type benchResult struct{ requests, perSecond float64 }

// benchOnce runs the benchmark binary bin once, at 16 clients, on the
// cases given, with env, and returns each case's figures.
func benchOnce(ctx context.Context, o options, bin string, env, cases []string) (map[string]benchResult, error) {
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^$", "-test.bench", "^BenchmarkEngine$/^c16$/^("+strings.Join(cases, "|")+")$",
		"-test.benchtime", o.benchTime, "-test.count", "1", "-test.timeout", "30m")
	cmd.Dir = filepath.Join(o.repo, "runtime", "idemecho")
	cmd.Env = append(append(os.Environ(), env...), "IDEMGEN_PG_DURABLE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%v\n%s", err, lastLines(out, 30))
	}
	got := map[string]benchResult{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := benchLine.FindStringSubmatch(sc.Text()); m != nil {
			n, _ := strconv.ParseFloat(m[2], 64)
			v, _ := strconv.ParseFloat(m[3], 64)
			got[m[1]] = benchResult{n, v}
		}
	}
	for _, c := range cases {
		if _, ok := got[c]; !ok {
			return nil, fmt.Errorf("no figures for %s:\n%s", c, lastLines(out, 30))
		}
	}
	return got, nil
}

// buildBench builds the benchmark's test binary, runtime/idemecho's, and
// returns its path and what removes it.
func buildBench(ctx context.Context, o options) (string, func(), error) {
	bin := filepath.Join(os.TempDir(), fmt.Sprintf("idemecho-bench-%d.test", os.Getpid()))
	build := exec.CommandContext(ctx, goCommand(), "test", "-c", "-o", bin, "./runtime/idemecho")
	build.Dir = o.repo
	if out, err := build.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("building the benchmark: %v\n%s", err, out)
	}
	return bin, func() { os.Remove(bin) }, nil
}

// scaleRound measures how capacity grows with workers, honestly for one
// machine: clusters of 1, 2 and 4 workers (-scale-workers), each worker's
// PostgreSQL bounded to the same CPU quota (-cpu-quota, a cgroup), the
// records and the benchmark's business table placed by tenant and
// co-located, and the benchmark's service one instance per worker, so that
// no request goes through the coordinator. It reports single-phase
// requests/s at 16 clients for each size, and each size's against the
// smallest.
func scaleRound(ctx context.Context, o options) (string, error) {
	bin, remove, err := buildBench(ctx, o)
	if err != nil {
		return "", harness(err)
	}
	defer remove()
	var sizes []int
	for _, f := range strings.Split(o.scaleWorkers, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return "", harness(fmt.Errorf("-scale-workers %q: want worker counts such as 1,2,4", o.scaleWorkers))
		}
		sizes = append(sizes, n)
	}
	cases := []string{"single-phase"}
	reqs := map[int][]float64{}
	for round := range o.benchRounds {
		order := slices.Clone(sizes)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, n := range order {
			fmt.Fprintf(os.Stderr, "scale: round %d of %d, %d worker(s)\n", round+1, o.benchRounds, n)
			cl, err := citus.Start(ctx, citus.Options{Workers: n, Durable: true, CPUQuota: o.cpuQuota})
			if err != nil {
				return "", harness(err)
			}
			env := []string{"DATABASE_URL=" + cl.URL(), pglocal.CitusEnv + "=1", dbtest.PlacementEnv + "=bigint",
				"IDEMGEN_BENCH_ENTRIES=" + strings.Join(workerURLs(cl), ",")}
			got, err := benchOnce(ctx, o, bin, env, cases)
			cl.Stop()
			if err != nil {
				return "", harness(fmt.Errorf("the benchmark on %d worker(s): %w", n, err))
			}
			reqs[n] = append(reqs[n], got["single-phase"].perSecond)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "single-phase at 16 clients, %d interleaved rounds of %s requests; each worker's PostgreSQL bounded to %.2f CPU (cgroup), durable nodes,\n", o.benchRounds, o.benchTime, o.cpuQuota)
	fmt.Fprintf(&b, "records and the business table by tenant (64 tenants), co-located; one service instance per worker, none through the coordinator\n")
	fmt.Fprintf(&b, "  %-8s %10s %12s\n", "workers", "r/s", "against 1st")
	base := median(reqs[sizes[0]])
	for _, n := range sizes {
		r := median(reqs[n])
		fmt.Fprintf(&b, "  %-8d %10.0f %12.2f\n", n, r, r/base)
	}
	return b.String(), nil
}

// workerURLs are the connection strings of cl's workers.
func workerURLs(cl *citus.Cluster) []string {
	var out []string
	for _, w := range cl.Workers {
		out = append(out, w.URL(citus.DB))
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
