package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/internal/dbtest"
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
	if rep.Prune.Deleted != int64(cfg.expired) || rep.Prune.During.Claims == 0 || rep.Prune.Before.Claims == 0 {
		t.Errorf("prune: %+v; want all %d expired records deleted, with claims before and during", rep.Prune, cfg.expired)
	}
	if s := rep.Size; s.Records < 5000 || s.Total <= s.Row || s.Body <= 0 || s.BeyondBody != s.Total-s.Body || len(s.Indexes) != 3 {
		t.Errorf("bytes per record: %+v", s)
	}
	if h := rep.HOT; h.Refreshes < int64(cfg.held) || h.HOT != h.Refreshes || h.Updates <= h.HOT {
		t.Errorf("refreshes: %+v; want at least one per held execution, each a HOT update, and the completions besides", h)
	}
}
