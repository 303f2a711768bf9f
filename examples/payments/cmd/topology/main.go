// Command topology runs the payments example on production-shaped
// PostgreSQL topologies and prints their figures; `make topology` runs it.
//
//   - failover: a pg_auto_failover formation (monitor, primary, synchronous
//     standby) from Debian's packages; the services connect with a
//     multi-host URL (target_session_attrs=read-write); during a load of at
//     least 1,000 intents the primary is killed with SIGKILL and the
//     standby promoted; the chaos checker counts duplicates and losses.
//   - async: the same with idem.Options.AsyncClaimCommit on and every claim
//     committed on its own, so that the option applies; before the
//     failover the standby's replay is held back for -lag-hold, so that
//     the services' replication lag gauge rises and, with -prometheus,
//     IdemgenReplicationLagHigh fires (the round fails if it does not, and
//     the failover round fails if it fires there).
//   - pooler: PgBouncer in transaction mode in front of PostgreSQL: the
//     engine with pgx's default query-exec mode, then with cache_describe;
//     the conformance tests through it; the chaos short round through it.
//   - proxy (not in the default list; -rounds=proxy runs only it): HAProxy
//     from Debian's package in front of two payments instances, resending
//     POSTs (retry-on all-retryable-errors, redispatch) after a server
//     timeout shorter than a card call; one instance is killed with
//     SIGKILL and restarted during the load; clients take a 409 as final;
//     it counts duplicates, losses, and intents whose client got an error
//     although their payment was made (see proxy.go).
//
// Missing Debian packages are installed when run as root; otherwise it
// prints the apt-get line and exits 2. Everything runs under one temporary
// directory on loopback ports picked free, and is stopped and removed at
// the end, on failure, and on SIGINT or SIGTERM. It exits 1 when a round
// broke a promise or a conformance test failed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemgen/idemgen/examples/payments/chaos"
	"github.com/idemgen/idemgen/internal/topology"
	"github.com/idemgen/idemgen/pglocal"
)

// ExecMode is the pgx query-exec mode the services use through PgBouncer:
// statement descriptions are cached per connection, statements are sent
// unnamed (Parse, Bind, Execute in one round trip), so nothing depends on a
// named prepared statement living on one server connection.
const ExecMode = "cache_describe"

// ConformancePackages are the tests run through the pooler, by module
// directory (relative to the repository): the engine's protocol, the echo,
// net/http and gin adapters (the conformance suite), the OpenTelemetry
// adapter, and the payments example's API, client and outbox.
var ConformancePackages = []struct {
	Dir  string
	Pkgs []string
}{
	{".", []string{"./runtime/idem", "./runtime/idemecho", "./runtime/idemstd", "./runtime/idemotel"}},
	{"runtime/idemgin", []string{"."}},
	{"examples", []string{"./payments/api", "./payments/payclient", "./payments/outbox"}},
}

type options struct {
	repo              string
	payments, cardnet string
	rounds            string
	seed              uint64
	clients, intents  int
	think, faultAfter time.Duration
	// prometheus and rules: a Prometheus server beside the failover
	// rounds' services, whose report then gives the signals (takeovers
	// across the failover among them) and the alerts that fired.
	prometheus, rules string
	// lagHold is how long the async round holds the standby's replay back
	// before its failover: past IdemgenReplicationLagHigh's 10s and 1m.
	lagHold time.Duration
	proxy   proxyOptions
}

func main() {
	var o options
	flag.StringVar(&o.repo, "repo", "..", "the repository's root, whose tests the pooler round runs")
	flag.StringVar(&o.payments, "payments", "bin/payments", "the payments binary")
	flag.StringVar(&o.cardnet, "cardnet", "bin/cardnet", "the cardnet binary")
	flag.StringVar(&o.rounds, "rounds", "failover,async,pooler", "which rounds to run, comma-separated: failover, async, pooler, proxy (HAProxy resending POSTs; not in the default list, -rounds=proxy runs only it)")
	flag.Uint64Var(&o.seed, "seed", 20261201, "seed of the failover rounds' clients and faults")
	flag.IntVar(&o.clients, "clients", 16, "concurrent clients in the failover rounds")
	flag.IntVar(&o.intents, "intents", 63, "intents per client in the failover rounds (at least; 16 x 63 = 1,008)")
	flag.DurationVar(&o.think, "think", 300*time.Millisecond, "pause between a client's intents in the failover rounds")
	flag.DurationVar(&o.faultAfter, "fault-after", 8*time.Second, "mean time from the start of the load to the failover")
	flag.DurationVar(&o.lagHold, "lag-hold", 90*time.Second, "how long the async round holds the standby's replay back before its failover (0: not at all)")
	flag.StringVar(&o.prometheus, "prometheus", "", "a Prometheus server binary to evaluate the alert rules beside the failover rounds' services")
	flag.IntVar(&o.proxy.clients, "proxy-clients", 15, "concurrent clients in the proxy round")
	flag.IntVar(&o.proxy.intents, "proxy-intents", 5, "intents per client in the proxy round, at least: clients go on until the killed instance is back (15 x 5 = 75)")
	flag.DurationVar(&o.proxy.think, "proxy-think", 200*time.Millisecond, "pause between a client's intents in the proxy round")
	flag.DurationVar(&o.proxy.cardLatency, "proxy-card-latency", 1200*time.Millisecond, "how long a card call takes in the proxy round (HAProxy's server timeout is 700ms)")
	flag.DurationVar(&o.proxy.killAfter, "proxy-kill-after", 2*time.Second, "from the start of the proxy round's load to the SIGKILL of one payments instance")
	flag.DurationVar(&o.proxy.down, "proxy-down", time.Second, "how long the killed instance stays down before its restart on the same port")
	flag.StringVar(&o.rules, "rules", "", "the alert rules, with -prometheus (default: deploy/prometheus/idemgen-rules.yaml under -repo)")
	flag.Parse()
	if o.rules == "" {
		o.rules = filepath.Join(o.repo, "deploy", "prometheus", "idemgen-rules.yaml")
	}
	os.Exit(run(o))
}

// cleanups is what run started, stopped in reverse order at the end or on
// a signal.
type cleanups struct {
	mu    sync.Mutex
	funcs []func()
}

func (c *cleanups) add(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.funcs = append(c.funcs, f)
}

func (c *cleanups) run() {
	c.mu.Lock()
	funcs := c.funcs
	c.funcs = nil
	c.mu.Unlock()
	for i := len(funcs) - 1; i >= 0; i-- {
		funcs[i]()
	}
}

func run(o options) int {
	rounds := strings.Split(o.rounds, ",")
	if slices.ContainsFunc(rounds, func(r string) bool { return r != "proxy" }) {
		if err := topology.EnsurePackages(os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	if slices.Contains(rounds, "proxy") {
		if err := ensureHAProxy(os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	root, err := os.MkdirTemp("", "idemgen-topology-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "topology:", err)
		return 2
	}
	// The postgres user works inside it; temporary directories of what
	// runs here (throwaway clusters, test databases) go inside it too, so
	// that removing it removes everything.
	os.Chmod(root, 0o755)
	os.Setenv("TMPDIR", root)
	var c cleanups
	c.add(func() { os.RemoveAll(root) })
	defer c.run()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "\ntopology: %v: stopping everything it started\n", s)
		c.run()
		os.Exit(130)
	}()
	ctx := context.Background()
	fmt.Fprintf(os.Stderr, "topology: working in %s\n", root)

	var figures []string
	code := 0
	for _, round := range rounds {
		var out string
		var err error
		switch round {
		case "failover", "async":
			out, err = failoverRound(ctx, o, &c, filepath.Join(root, round), round == "async")
		case "pooler":
			out, err = poolerRound(ctx, o, &c, filepath.Join(root, round))
		case "proxy":
			out, err = proxyRound(ctx, o, &c, filepath.Join(root, round))
		default:
			err = fmt.Errorf("unknown round %q (failover, async, pooler, proxy)", round)
		}
		fmt.Printf("\n== %s ==\n%s", round, out)
		if err != nil {
			fmt.Printf("%s round: %v\n", round, err)
			code = 1
			if errors.Is(err, errHarness) {
				code = 2
			}
		}
		figures = append(figures, round+": "+verdict(err))
	}
	fmt.Printf("\n== summary ==\n  %s\n", strings.Join(figures, "\n  "))
	return code
}

func verdict(err error) string {
	if err != nil {
		return "FAILED: " + strings.SplitN(err.Error(), "\n", 2)[0]
	}
	return "ok"
}

// errHarness marks an error of the harness, not a broken promise.
var errHarness = errors.New("harness")

func harness(err error) error { return fmt.Errorf("%w: %w", errHarness, err) }

// failoverRound runs the payments example on a formation and fails its
// primary over during the load.
func failoverRound(ctx context.Context, o options, c *cleanups, dir string, async bool) (string, error) {
	var b strings.Builder
	start := time.Now()
	f, err := topology.StartFormation(ctx, dir, "chaos")
	if err != nil {
		return "", harness(err)
	}
	c.add(func() { f.Stop() })
	defer f.Stop()
	repl, err := f.Replication(ctx)
	if err != nil {
		return "", harness(err)
	}
	fmt.Fprintf(&b, "formation up in %s: %s\n  services connect with %s\n", time.Since(start).Round(100*time.Millisecond), repl, f.URL())
	cfg := chaos.Config{
		Seed: o.seed, Clients: o.clients, RetryableClients: 2, Intents: o.intents, Think: o.think,
		Failovers: 1, FaultEvery: o.faultAfter, DropRate: 0.02, RefundShare: 0.1, CardFailAfter: 0.03,
		Deadline: 6 * time.Minute, Webhooks: true, WebhookDuplicates: 0.1, WebhookRefunds: 0.1,
		PaymentsBin: o.payments, CardnetBin: o.cardnet, Out: os.Stderr, Dir: filepath.Join(dir, "chaos"), Database: f,
		Prometheus: o.prometheus, Rules: o.rules,
	}
	if async {
		cfg.ServiceArgs = []string{"-async-claim-commit", "-separate-claim"}
		cfg.LagBeforeFailover = o.lagHold
		fmt.Fprintf(&b, "  services run with %s\n", strings.Join(cfg.ServiceArgs, " "))
	}
	if async {
		// First, what the option risks: claims lost with the primary.
		for i, p := range []struct {
			async bool
			wait  time.Duration
		}{{true, 0}, {true, time.Second}, {false, 0}} {
			lost, err := lostClaims(ctx, c, filepath.Join(dir, fmt.Sprintf("claims-%d", i)), p.async, p.wait)
			if err != nil {
				return b.String(), harness(err)
			}
			fmt.Fprintf(&b, "  %d claims committed alone, primary killed %s after the last, AsyncClaimCommit %t: %d missing on the promoted standby\n",
				claimProbe, p.wait, p.async, lost)
			if !p.async && lost != 0 {
				return b.String(), fmt.Errorf("%d claims committed synchronously were lost in the failover", lost)
			}
		}
	}
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		return b.String(), harness(err)
	}
	for _, n := range rep.FailoverNotes {
		fmt.Fprintf(&b, "  failover: %s\n", n)
	}
	b.WriteString(rep.Table())
	lagAlert := ""
	for _, a := range rep.Alerts {
		if a.Name == "IdemgenReplicationLagHigh" {
			lagAlert = a.State
		}
	}
	wantLag := async && o.lagHold > 0
	switch {
	case !rep.OK():
		return b.String(), fmt.Errorf("broken promise, seed %d:\n%s", rep.Seed, strings.Join(rep.Problems, "\n"))
	case rep.Failovers != 1 || rep.Intents < 1000:
		return b.String(), fmt.Errorf("the round did not run as planned: %d failovers, %d intents", rep.Failovers, rep.Intents)
	case o.prometheus != "" && wantLag && lagAlert != "firing":
		return b.String(), fmt.Errorf("the standby's replay was held back %s, and IdemgenReplicationLagHigh did not fire (%q)", o.lagHold, lagAlert)
	case o.prometheus != "" && !wantLag && lagAlert != "":
		return b.String(), fmt.Errorf("IdemgenReplicationLagHigh was %s although nothing held the standby back", lagAlert)
	}
	return b.String(), nil
}

// poolerRound runs the engine, the conformance tests and the chaos short
// round through PgBouncer in transaction mode.
func poolerRound(ctx context.Context, o options, c *cleanups, dir string) (string, error) {
	var b strings.Builder
	cluster, err := pglocal.Start(ctx, pglocal.Options{TCPPort: -1})
	if err != nil {
		return "", harness(err)
	}
	c.add(func() { cluster.Stop() })
	defer cluster.Stop()
	bouncer := &topology.Bouncer{Dir: filepath.Join(dir, "pgbouncer")}
	if _, err := bouncer.Start(ctx, cluster.TCPAddr()); err != nil {
		return "", harness(err)
	}
	c.add(bouncer.Stop)
	defer bouncer.Stop()
	version, _ := exec.Command("pgbouncer", "--version").Output()
	fmt.Fprintf(&b, "%s in transaction mode (pool of %d server connections) in front of PostgreSQL %s\n",
		strings.SplitN(string(version), "\n", 2)[0], bouncer.PoolSize, cluster.TCPAddr())

	// 1. What breaks: the engine with pgx's default mode, then with ExecMode.
	if err := pglocal.CreateDatabase(ctx, cluster.DSN("postgres"), "probe"); err != nil {
		return b.String(), harness(err)
	}
	var failed error
	for _, mode := range []string{"", ExecMode} {
		res, err := probe(ctx, bouncer.URL("probe"), mode)
		if err != nil {
			return b.String(), harness(err)
		}
		fmt.Fprintf(&b, "engine, %s\n", res)
		if mode == ExecMode && res.failed > 0 {
			failed = errors.Join(failed, fmt.Errorf("%d of %d requests failed with %s", res.failed, res.requests, mode))
		}
	}

	// 2. The conformance tests through the pooler.
	started := time.Now()
	var summary string
	for _, m := range ConformancePackages {
		cmd := exec.CommandContext(ctx, goCommand(), append([]string{"test", "-count=1"}, m.Pkgs...)...)
		cmd.Dir = filepath.Join(o.repo, m.Dir)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+bouncer.URL("postgres")+"&default_query_exec_mode="+ExecMode, "IDEMGEN_PG_POOLED=1")
		out, err := cmd.CombinedOutput()
		res, nfail := topology.ParseGoTest(string(out))
		summary += topology.Summary(res)
		if err != nil || nfail > 0 || len(res) != len(m.Pkgs) {
			failed = errors.Join(failed, fmt.Errorf("conformance tests through PgBouncer: %d failed (%v):\n%s", nfail, err, lastLines(out, 60)))
		}
	}
	fmt.Fprintf(&b, "conformance tests through PgBouncer (%s, %s):\n%s", ExecMode, time.Since(started).Round(time.Second), summary)

	// 3. The chaos short round through the pooler.
	cfg := chaos.ShortRound(o.payments, o.cardnet)
	cfg.Out, cfg.Dir = os.Stderr, filepath.Join(dir, "chaos")
	cfg.Pooler = &topology.Bouncer{Dir: filepath.Join(dir, "chaos-pgbouncer")}
	cfg.QueryExecMode = ExecMode
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		return b.String(), harness(err)
	}
	fmt.Fprintf(&b, "chaos short round through PgBouncer (%s):\n%s", ExecMode, rep.Table())
	if err := rep.CheckShortRound(); err != nil {
		failed = errors.Join(failed, err)
	}
	return b.String(), failed
}

// goCommand is the go command that runs the tests: $GO, or go.
func goCommand() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// lastLines returns the last n lines of out.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
