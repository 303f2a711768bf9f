// Command storebench measures the idempotency store at scale and prints
// four figures (issue 12): claim latency with 0, 1 million and 5 million
// records in the table; the pruner's throughput while claims continue, and
// what it does to their p99; bytes per record; and whether lease refreshes
// are heap-only (HOT) updates. It also sweeps the number of clients to find
// where one PostgreSQL saturates. Run it with `make bench-store`;
// docs/scaling.md has the figures.
//
// With -layouts it measures instead the bytes per record of the engine's
// table and of the candidate layouts in layouts/*.sql, on -layout-records
// completed records each (`make bench-layouts`; docs/scaling.md, "Bytes per
// record").
//
// With -waits it measures instead how soon the duplicates of an execution
// in flight are answered once it ends, in the same engine and from another,
// and the statements a second their waiting costs (`make bench-wait`;
// docs/performance.md, "Waiting for an execution in flight").
//
// With -render it measures instead what replay.render saves in bytes per
// record and costs on a replay (`make bench-render`; docs/scaling.md and
// docs/performance.md).
//
// It starts a throwaway durable cluster (fsync, synchronous_commit and
// full_page_writes on) unless DATABASE_URL names a server, where it creates
// and drops a database of its own.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/idemgen/idemgen/pglocal"
)

func main() {
	cfg := defaults()
	sizes := flag.String("sizes", joinInts(cfg.sizes), "table sizes (records) at which claim latency is measured, comma-separated, ascending")
	flag.IntVar(&cfg.expired, "expired", cfg.expired, "expired records loaded for the pruner to delete")
	flag.IntVar(&cfg.clients, "clients", cfg.clients, "concurrent clients claiming during the latency and refresh figures")
	flag.IntVar(&cfg.rate, "rate", cfg.rate, "claims a second offered before and while the pruner runs")
	flag.DurationVar(&cfg.window, "window", cfg.window, "how long each latency measurement runs")
	flag.IntVar(&cfg.batch, "batch", cfg.batch, "the pruner's batch size (records per transaction)")
	flag.IntVar(&cfg.rounds, "rounds", cfg.rounds, "prune rounds, each loading -expired records; their claims are pooled for the p99s")
	flag.Float64Var(&cfg.rest, "rest", cfg.rest, "the pruner's rest after each batch, as a multiple of its time (idemadmin.PruneOptions.Rest)")
	sweep := flag.String("sweep", joinInts(cfg.sweep), "client counts of the saturation sweep, comma-separated (empty: no sweep)")
	flag.IntVar(&cfg.held, "held", cfg.held, "executions held open while their leases are refreshed")
	flag.IntVar(&cfg.fillfactor, "fillfactor", 0, "the records table's fillfactor, to compare settings (0: the migrations')")
	waitsMode := flag.Bool("waits", false, "measure instead how soon duplicates waiting for an execution in flight are answered, and the statements a second their waiting costs")
	renderMode := flag.Bool("render", false, "measure instead the bytes per record of answers stored byte for byte against stored compact (replay.render), and the cost of a rendered replay against a stored one")
	layoutsMode := flag.Bool("layouts", false, "measure bytes per record of today's layout and the candidates in layouts/*.sql instead of the four figures")
	layoutRecords := flag.Int("layout-records", 1_000_000, "completed records loaded into each layout with -layouts")
	settings := map[string]string{
		// Loading millions of records should not checkpoint every few
		// seconds; checkpoint_timeout (5 min) still applies.
		"max_wal_size": "4GB",
		// The pruner's deletes write a full-page image of every page they
		// touch first after a checkpoint; compressed, they weigh a fraction
		// of the WAL that claims' commits wait to flush (docs/scaling.md,
		// docs/operations.md). -set wal_compression=off compares.
		"wal_compression": "lz4",
	}
	flag.Func("set", "a server setting `name=value` of the throwaway cluster (repeatable), e.g. wal_compression=lz4", func(v string) error {
		name, value, ok := strings.Cut(v, "=")
		if !ok || name == "" {
			return fmt.Errorf("%q is not name=value", v)
		}
		settings[name] = value
		return nil
	})
	flag.Parse()
	var err error
	if cfg.sizes, err = parseInts(*sizes); err != nil {
		fail(fmt.Errorf("-sizes: %w", err))
	}
	if cfg.sweep, err = parseInts(*sweep); err != nil {
		fail(fmt.Errorf("-sweep: %w", err))
	}
	if cfg.rounds < 1 {
		fail(fmt.Errorf("-rounds %d: want at least 1", cfg.rounds))
	}
	if cfg.rest < 0 {
		fail(fmt.Errorf("-rest %v: want 0 or more", cfg.rest))
	}
	// Stopped early, it still stops the cluster it started and removes it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env, err := pglocal.Open(ctx, "storebench", pglocal.Options{Durable: true, Settings: settings})
	if err != nil {
		fail(err)
	}
	switch {
	case *waitsMode:
		_, err = runWaits(ctx, env.URL, waitsDefaults(), os.Stdout)
	case *renderMode:
		_, _, err = runRender(ctx, env.URL, renderDefaults(), os.Stdout)
	case *layoutsMode:
		_, err = runLayouts(ctx, env.URL, *layoutRecords, os.Stdout)
	default:
		_, err = run(ctx, env.URL, cfg, os.Stdout)
	}
	env.Close()
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "storebench:", err)
	os.Exit(1)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a count", f)
		}
		out = append(out, n)
	}
	return out, nil
}
