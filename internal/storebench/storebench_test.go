package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// TestSmallRun runs the whole bench with tiny counts, so that it cannot
// rot: it must produce the four figures, with every refresh a HOT update.
// It asserts no timing.
func TestSmallRun(t *testing.T) {
	cfg := config{
		sizes:   []int{0, 2000, 5000},
		expired: 3000,
		clients: 2,
		rate:    500,
		window:  300 * time.Millisecond,
		batch:   500,
		rounds:  2,
		rest:    0.5,
		sweep:   []int{1, 3},
		held:    6,
		lease:   time.Second,
		hold:    900 * time.Millisecond,
	}
	var out bytes.Buffer
	rep, err := run(context.Background(), dbtest.URL(t), cfg, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, figure := range []string{"\n1. ", "\n2. prune: ", "\n3. bytes per record", "\n4. lease refreshes: "} {
		if !strings.Contains(out.String(), figure) {
			t.Errorf("the output lacks figure %q", strings.TrimSpace(figure))
		}
	}
	if len(rep.Claims) != len(cfg.sizes) || len(rep.Sweep) != len(cfg.sweep) {
		t.Fatalf("%d latency figures and %d sweep points; want %d and %d", len(rep.Claims), len(rep.Sweep), len(cfg.sizes), len(cfg.sweep))
	}
	for i, l := range append(rep.Claims, rep.Sweep...) {
		if l.Claims == 0 || l.P50 <= 0 || l.P99 < l.P50 {
			t.Errorf("latency figure %d: %+v", i, l)
		}
	}
	if rep.Claims[2].Records < 5000 {
		t.Errorf("the last latency figure ran on %d records; want at least 5000", rep.Claims[2].Records)
	}
	if rep.Prune.Deleted != int64(cfg.rounds*cfg.expired) || rep.Prune.During.Claims == 0 || rep.Prune.Before.Claims == 0 {
		t.Errorf("prune: %+v; want all %d expired records of %d rounds deleted, with claims before and during", rep.Prune, cfg.rounds*cfg.expired, cfg.rounds)
	}
	if n := strings.Count(out.String(), "\n   round "); n != cfg.rounds {
		t.Errorf("%d prune rounds printed; want %d", n, cfg.rounds)
	}
	// The indexes: the primary key, records_expires_at, records_abandoned,
	// records_claimed and records_natural_key (partial: empty here).
	if s := rep.Size; s.Records < 5000 || s.Total <= s.Row || s.Body <= 0 || s.BeyondBody != s.Total-s.Body || len(s.Indexes) != 5 {
		t.Errorf("bytes per record: %+v", s)
	}
	if h := rep.HOT; h.Refreshes < int64(cfg.held) || h.HOT != h.Refreshes || h.Updates <= h.HOT {
		t.Errorf("refreshes: %+v; want at least one per held execution, each a HOT update, and the completions besides", h)
	}
}

// TestLayouts runs the layout study on a few thousand records, so that its
// SQL cannot rot: every layout loads and is printed, the baseline is the
// migrations' table, and it is smaller than migration 004's (A4). It
// asserts no timing.
func TestLayouts(t *testing.T) {
	const records = 3000
	ctx := context.Background()
	url := dbtest.URL(t)
	var out bytes.Buffer
	figs, err := runLayouts(ctx, url, records, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(figs) != len(layouts) {
		t.Fatalf("%d layouts measured; want %d", len(figs), len(layouts))
	}
	byName := map[string]layoutFigure{}
	for i, f := range figs {
		byName[f.Name] = f
		if f.Name != layouts[i] {
			t.Errorf("layout %d is %s; want %s", i, f.Name, layouts[i])
		}
		if !strings.Contains(out.String(), "\n"+f.String()+"\n") {
			t.Errorf("layout %s is not printed", f.Name)
		}
		if f.Records != records {
			t.Errorf("layout %s has %d records; want %d", f.Name, f.Records, records)
		}
		if f.Heap <= 0 || f.Toast < 0 || f.Maps < 0 || f.Total <= f.Heap || f.Row <= 0 || f.Body <= 0 || f.Headers <= 0 ||
			f.BeyondBody <= 0 || f.BeyondAll <= 0 || f.BeyondBody != f.Total-f.Body || len(f.Indexes) == 0 {
			t.Errorf("layout %s: %+v", f.Name, f)
		}
		sum := f.Heap + f.Toast + f.Maps
		for _, ix := range f.Indexes {
			if ix.PerRecord <= 0 {
				t.Errorf("layout %s: index %s has %.1f bytes per record", f.Name, ix.Name, ix.PerRecord)
			}
			sum += ix.PerRecord
		}
		if d := sum - f.Total; d > 0.01 || d < -0.01 {
			t.Errorf("layout %s: heap, TOAST, maps and indexes make %.2f; the relation %.2f", f.Name, sum, f.Total)
		}
	}
	a, a4 := byName["A"], byName["A4"]
	if a.BeyondBody >= a4.BeyondBody {
		t.Errorf("beyond the body, A %.1f and A4 %.1f; want migration 005's receipts smaller", a.BeyondBody, a4.BeyondBody)
	}
	if a.State != 0 || a4.State <= 0 {
		t.Errorf("phase state of a completed record: %.1f in A, %.1f in A4; want none in A, some in A4", a.State, a4.State)
	}

	// The baseline's indexes are those the migrations make.
	schema := dbtest.Schema(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := idemmigrate.New(pool, schema).Up(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1::regclass ORDER BY c.relname`, schema+".records")
	if err != nil {
		t.Fatal(err)
	}
	want, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ix := range a.Indexes {
		got = append(got, ix.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) || !slices.Contains(got, "records_pkey") || !slices.Contains(got, "records_expires_at") {
		t.Errorf("A's indexes are %v; the migrations make %v", got, want)
	}
}

// TestSmallWaits runs the -waits measurement small, so that it cannot rot:
// every case answers every duplicate with the execution's response (the
// measurement fails otherwise) and reports its figures. It asserts no
// timing; the round trips are a bound on cost, not on time: a Watch of
// every committed key each 50 ms tick, or for a key a claim not yet
// committed holds, one waiter's claim and its rollback each 100 ms.
func TestSmallWaits(t *testing.T) {
	var out bytes.Buffer
	cases, err := runWaits(context.Background(), dbtest.URL(t), waitsConfig{rounds: 2, waiters: []int{1, 5}, hold: 600 * time.Millisecond}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != 8 {
		t.Fatalf("%d cases; want 2 modes x 2 engines x 2 counts", len(cases))
	}
	for _, c := range cases {
		if c.P50 <= 0 || c.Max < c.P50 || c.Trips <= 0 || c.Statements < c.Trips {
			t.Errorf("%+v", c)
		}
		if c.Trips > 25 {
			t.Errorf("%s: %.1f round trips a second while waiting; want 20: one Watch each 50 ms, or a claim and its rollback each 100 ms", c, c.Trips)
		}
	}
}

// TestSmallRender runs the -render measurement small: an answer stored
// compact takes fewer bytes per record than the same answer stored whole,
// and both modes replay.
func TestSmallRender(t *testing.T) {
	url := dbtest.URL(t)
	var out strings.Builder
	sizes, cases, err := runRender(context.Background(), url, renderConfig{records: 20, sizes: []int{100 << 10}, clients: []int{1, 2}, rounds: 1, window: 100 * time.Millisecond}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	if len(sizes) != 1 || sizes[0].Render <= 0 || sizes[0].Stored < 2*sizes[0].Render {
		t.Errorf("bytes per record: %+v; want the compact one far smaller", sizes)
	}
	for _, c := range cases {
		if c.StoredRate <= 0 || c.RenderRate <= 0 {
			t.Errorf("no replays: %+v", c)
		}
	}
}
