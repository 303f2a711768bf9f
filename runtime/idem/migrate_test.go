package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

func TestMigrate(t *testing.T) {
	t.Parallel()
	pool, schema := idemtest.Pool(t)
	ctx := context.Background()
	// Four processes starting at once all migrate; exactly one applies.
	var wg sync.WaitGroup
	applied := make([][]int, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied[i], errs[i] = idemmigrate.New(pool, schema).Up(ctx)
		}()
	}
	wg.Wait()
	total := 0
	for i := range 4 {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		total += len(applied[i])
	}
	all, _ := idemmigrate.New(nil, schema).Migrations()
	if total != len(all) {
		t.Fatalf("applied %d migrations in all, want %d once", total, len(all))
	}
	if v, err := idemmigrate.New(pool, schema).Version(ctx); err != nil || v != all[len(all)-1].Version {
		t.Fatalf("Version = %d, %v", v, err)
	}
	if _, err := idemmigrate.New(pool, schema).Down(ctx, 0); err != nil {
		t.Fatal(err)
	}
	var exists bool
	pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, schema+".records").Scan(&exists)
	if exists {
		t.Fatal("records table survived Down(0)")
	}
	if got, err := idemmigrate.New(pool, schema).Up(ctx); err != nil || len(got) != len(all) {
		t.Fatalf("re-Migrate = %v, %v", got, err)
	}
	if _, err := idemmigrate.New(pool, "Bad-Name").Up(ctx); err == nil {
		t.Fatal("an invalid schema name was accepted")
	}
	if _, err := idem.New(pool, idem.Options{Schema: "x; DROP TABLE y"}); err == nil {
		t.Fatal("New accepted an invalid schema name")
	}
}

// TestUpgradeKeepsRecords: a store in use when migrations 003 to 005
// rewrite it keeps every record: a completed one written in 002's shape
// (jsonb, completed_at) replays the same bytes, its headers still the JSON
// they were written in, and a half-done one resumes from its recovery
// point with its state. Reverting 005 refuses while completed records
// remain, which keep no key; without them it reverts and applies again.
func TestUpgradeKeepsRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	cd, runs := &card{charges: map[string]string{}}, 0
	crashed := make(chan struct{})
	go func() {
		defer close(crashed)
		idem.Run(ctx, e.eng, payOp, request("t", "half", "b"), threePhases("half", cd, &runs, "before-charge"))
	}()
	<-crashed
	// As an engine of that time claimed it: the scope itself, derivation 2
	// (derivation 3 keeps the scope's digest, from which migration 005
	// could not make the record's id again), no derived-key length.
	e.exec(`UPDATE ` + e.schema + `.records SET scope = 't', key_derivation = 2, derived_key_length = NULL WHERE key = 'half'`)
	// The store as the engine before migration 003 left it.
	if _, err := idemmigrate.New(e.pool, e.schema).Down(ctx, 2); err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO `+e.schema+`.records (namespace, scope, key, operation, fingerprint, state, recovery_point,
    phase_state, response_status, response_headers, response_body, completed_at, expires_at)
VALUES ('createPayment', 't', 'old', 'createPayment', $1, 'completed', 'finish', '{"recorded": true}', 201,
    '{"Content-Type": ["application/json"]}', '{"old":true}', now(), now() + interval '1 hour')`, request("t", "old", "b").Fingerprint)
	if got, err := idemmigrate.New(e.pool, e.schema).Up(ctx); err != nil || !slices.Equal(got, []int{3, 4, 5, 6, 7, 8}) {
		t.Fatalf("Migrate = %v, %v; want migrations 3 to 8 applied", got, err)
	}
	if n := e.count(`SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'records'
    AND (column_name, data_type) IN (('id', 'uuid'), ('response_headers', 'bytea'), ('state', 'text'), ('completed_at', 'timestamp with time zone'))`, e.schema); n != 2 {
		t.Fatalf("%d of id and the coded headers are there, or state or completed_at remains", n)
	}
	// A new engine, without a replay cache: every answer comes from the store.
	eng, err := idem.New(e.pool, idem.Options{Schema: e.schema, ReplayCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	old := func(step string) {
		t.Helper()
		out, err := idem.Run(ctx, eng, payOp, request("t", "old", "b"), twoPhases("old"))
		if err != nil || !out.Replayed || out.Response.Status != 201 || string(out.Response.Body) != `{"old":true}` ||
			out.Response.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: replay of the record written before 003 = %+v, %v", step, out, err)
		}
		out, err = idem.Run(ctx, eng, payOp, request("t", "old", "other body"), twoPhases("old"))
		if !errors.As(err, new(*idem.Error)) || err.(*idem.Error).Kind != idemtype.KindMismatch {
			t.Fatalf("%s: another request with its key = %+v, %v; want a mismatch", step, out, err)
		}
	}
	half := func(step string) {
		t.Helper()
		info, err := idemadmin.Inspect(ctx, eng, "createPayment", "t", "half")
		var st payState
		if err != nil || info.RecoveryPoint != "record" || info.Operation != "createPayment" ||
			json.Unmarshal(info.PhaseState, &st) != nil || !st.Recorded {
			t.Fatalf("%s: the half-done record = %+v, %v; want it at record, its state saying so", step, info, err)
		}
	}
	old("upgraded")
	half("upgraded")

	_, err = idemmigrate.New(e.pool, e.schema).Down(ctx, 4)
	if err == nil || !strings.Contains(err.Error(), "1 completed records keep no key") {
		t.Fatalf("reverting 005 with a completed record: %v; want an error that says it keeps no key", err)
	}
	if v, err := idemmigrate.New(e.pool, e.schema).Version(ctx); err != nil || v != 8 {
		t.Fatalf("after the refused revert: version %d, %v; want 8, as it was", v, err)
	}
	old("after the refused revert")
	e.exec(`DELETE FROM ` + e.schema + `.records WHERE owner_token IS NULL`)
	if got, err := idemmigrate.New(e.pool, e.schema).Down(ctx, 4); err != nil || !slices.Equal(got, []int{8, 7, 6, 5}) {
		t.Fatalf("reverting 005 with claimed records only: %v, %v", got, err)
	}
	if got, err := idemmigrate.New(e.pool, e.schema).Up(ctx); err != nil || !slices.Equal(got, []int{5, 6, 7, 8}) {
		t.Fatalf("applying 005 to 008 again: %v, %v", got, err)
	}
	half("reverted and applied again")

	e.expireLeases()
	out, err := idem.Run(ctx, eng, payOp, request("t", "half", "b"), threePhases("half", cd, &runs, ""))
	if err != nil || !out.Resumed || runs != 1 || len(cd.keys) != 1 {
		t.Fatalf("resuming the half-done record: %+v, %v; record ran %d times, %d charges; want it resumed after record", out, err, runs, len(cd.keys))
	}
	if info, err := idemadmin.Inspect(ctx, eng, "createPayment", "t", "half"); err != nil || info.State != "completed" {
		t.Fatalf("Inspect after the resume = %+v, %v", info, err)
	}
}

// TestClaimedIndexBuiltAhead: migration 004 keeps a records_claimed an
// operator built ahead (CREATE INDEX CONCURRENTLY, docs/operations.md),
// and refuses one that such a build left invalid (it failed, was
// cancelled, or still runs): the planner never uses an invalid index, and
// the migration must not drop one a build is still working on. Once the
// operator drops it, the migration builds it.
func TestClaimedIndexBuiltAhead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	claimed := func() (oid uint32, valid bool) {
		t.Helper()
		err := e.pool.QueryRow(ctx, `SELECT indexrelid::oid, indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)`,
			e.schema+".records_claimed").Scan(&oid, &valid)
		if err != nil {
			t.Fatalf("reading records_claimed: %v", err)
		}
		return oid, valid
	}
	if _, err := idemmigrate.New(e.pool, e.schema).Down(ctx, 3); err != nil {
		t.Fatal(err)
	}
	e.exec(`CREATE INDEX CONCURRENTLY records_claimed ON ` + e.schema + `.records (expires_at) WHERE state = 'claimed'`)
	ahead, _ := claimed()
	// Migration 4 alone, as a tool that applies one file at a time would
	// (005 makes the table anew, with indexes of its own).
	all, err := idemmigrate.New(nil, e.schema).Migrations()
	if err != nil {
		t.Fatal(err)
	}
	e.exec(all[3].Up)
	if oid, valid := claimed(); oid != ahead || !valid {
		t.Fatalf("built ahead: records_claimed is %d (valid %v) after the migration; want the one built ahead, %d", oid, valid, ahead)
	}
	e.exec(`DROP INDEX ` + e.schema + `.records_claimed`)

	// A concurrent build that fails leaves its index invalid: here a
	// unique one, over two claimed records.
	if _, err := idemmigrate.New(e.pool, e.schema).Down(ctx, 3); err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO ` + e.schema + `.records (namespace, scope, key, operation, fingerprint, state, owner_token, lease_until, expires_at)
SELECT 'ns', 't', 'k' || g, 'op', '\x00', 'claimed', gen_random_uuid(), now() + interval '1 minute', now() + interval '1 hour'
FROM generate_series(1, 2) g`)
	if _, err := e.pool.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY records_claimed ON `+e.schema+`.records (state) WHERE state = 'claimed'`); err == nil {
		t.Fatal("the failing concurrent build succeeded")
	}
	if _, valid := claimed(); valid {
		t.Fatal("a failed concurrent build left a valid index")
	}
	got, err := idemmigrate.New(e.pool, e.schema).Up(ctx)
	if err == nil || !strings.Contains(err.Error(), "records_claimed") || !strings.Contains(err.Error(), "DROP INDEX CONCURRENTLY") {
		t.Fatalf("left invalid: Migrate = %v, %v; want an error that says to drop records_claimed", got, err)
	}
	e.exec(`DROP INDEX CONCURRENTLY ` + e.schema + `.records_claimed`)
	if got, err := idemmigrate.New(e.pool, e.schema).Up(ctx); err != nil || !slices.Equal(got, []int{4, 5, 6, 7, 8}) {
		t.Fatalf("dropped: Migrate = %v, %v; want migrations 4 to 8 applied", got, err)
	}
	if _, valid := claimed(); !valid {
		t.Fatal("records_claimed is invalid after the migration")
	}
}

// TestUpgradeWaitsForWriters: migration 005 copies the records into a new
// table. A claim that a service (of the version before) commits while the
// migration runs must reach the new table, not be dropped with the old
// one: the migration locks the table before it copies, so it waits for
// the open transaction and then copies what it committed.
func TestUpgradeWaitsForWriters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	if _, err := idemmigrate.New(e.pool, e.schema).Down(ctx, 4); err != nil {
		t.Fatal(err)
	}
	writer, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(ctx)
	if _, err := writer.Exec(ctx, `INSERT INTO `+e.schema+`.records (namespace, scope, key, operation, fingerprint, state,
    owner_token, lease_until, expires_at)
VALUES ('createPayment', 't', 'during', 'createPayment', '\x00', 'claimed', gen_random_uuid(), now() + interval '1 minute', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	migrated := make(chan error, 1)
	go func() {
		_, err := idemmigrate.New(e.pool, e.schema).Up(ctx)
		migrated <- err
	}()
	// The migration waits for the writer's lock on the table (at its
	// LOCK TABLE, or, without one, at DROP TABLE after copying).
	deadline := time.Now().Add(30 * time.Second)
	for e.count(`SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = to_regclass($1)`, e.schema+".records") == 0 {
		select {
		case err := <-migrated:
			t.Fatalf("the migration ended (%v) without waiting for the writer", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the migration never waited for the writer")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records WHERE id = ` + e.schema + `.record_id('createPayment', 't', 'during')`); n != 1 {
		t.Fatalf("the claim committed during the migration: %d records; want 1", n)
	}
}

// TestDowngradeRefusesClaimsInFlight: migration 007 goes back only while
// no claim in flight was made with what the engines before it cannot
// resume: key derivation 3, or a kept derived-key length. Such a claim,
// resumed by an engine of migration 006, would send its foreign calls
// under another key. Once it completes, the migration goes back.
func TestDowngradeRefusesClaimsInFlight(t *testing.T) {
	e := newEnvIn(t, mode{idem.ClaimSeparate, modes[0].exec}, idem.Options{})
	ctx := context.Background()
	die := true
	phases := func() []idem.Phase[payState] {
		p := twoPhases("inflight")
		return append(p[:1:1], idem.Phase[payState]{Name: "charge", Foreign: func(context.Context, string, *payState) error {
			if die {
				runtime.Goexit()
			}
			return nil
		}}, p[1])
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		idem.Run(ctx, e.eng, payOp, request("t", "inflight", "b"), phases())
	}()
	<-done
	_, err := idemmigrate.New(e.pool, e.schema).Down(ctx, 6)
	if err == nil || !strings.Contains(err.Error(), "1 claims in flight") {
		t.Fatalf("reverting 007 with a claim in flight: %v; want an error that says why", err)
	}
	if v, err := idemmigrate.New(e.pool, e.schema).Version(ctx); err != nil || v != 8 {
		t.Fatalf("after the refused revert: version %d, %v; want 8, as it was", v, err)
	}
	die = false
	e.expireLeases()
	if out, err := idem.Run(ctx, e.eng, payOp, request("t", "inflight", "b"), phases()); err != nil || !out.Resumed {
		t.Fatalf("the retry: %+v, %v", out, err)
	}
	if got, err := idemmigrate.New(e.pool, e.schema).Down(ctx, 6); err != nil || !slices.Equal(got, []int{8, 7}) {
		t.Fatalf("reverting 007 once the claim completed: %v, %v", got, err)
	}
	if _, err := idemmigrate.New(e.pool, e.schema).Up(ctx); err != nil {
		t.Fatal(err)
	}
}
