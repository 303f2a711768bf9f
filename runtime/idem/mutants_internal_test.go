package idem

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/internal/dbtest"
)

// predicates lists every clause of the engine's SQL that protects a
// record, by statement (a block of sql/*.sql) and clause (as written
// there), with the test that fails when it is removed. docs/internals.md,
// "What protects a record", carries the same table.
var predicates = []struct {
	name      string
	statement string // the statement's block name...
	clause    string // ...the clause the mutant removes from it...
	stand     string // ...and what replaces it, which keeps its parameter typed
	test      string
}{
	{"owner token in advance's fence", "Advance", " AND owner_token = @owner_token", " AND @owner_token::uuid IS NOT NULL", "TestFenceWhileTakerRuns/*/*/advance"},
	{"owner token in complete's fence", "Complete", " AND owner_token = @owner_token", " AND @owner_token::uuid IS NOT NULL", "TestFenceWhileTakerRuns/*/*/complete"},
	{"owner token in release's fence", "Release", " AND owner_token = @owner_token", " AND @owner_token::uuid IS NOT NULL", "TestFenceWhileTakerRuns/*/*/release"},
	{"owner token in yield's fence", "Yield", " AND owner_token = @owner_token", " AND @owner_token::uuid IS NOT NULL", "TestFenceWhileTakerRuns/*/*/yield"},
	{"owner token in refresh's fence", "Refresh", " AND owner_token = @owner_token", " AND @owner_token::uuid IS NOT NULL", "TestRefreshIsFenced"},
	{"lease condition in takeover", "Takeover", " AND lease_until <= now()", "", "TestTakeoverRechecksLease"},
	{"liveness in the expired-record delete", "DeleteExpired", "lease_until <= now() AND ", "", "TestExpiredDeleteRechecksLiveness"},
	{"recovery point in the expired-record delete", "DeleteExpired", " AND recovery_point = ''", "", "TestHalfDoneRecordOutlivesRetention/*/*/claim_path"},
	{"recovery point in release", "Release", " AND recovery_point = @recovery_point", " AND @recovery_point::text IS NOT NULL", "TestReleaseAfterLostCommitAck"},
	{"retention in the pruner", "Prune", "AND expires_at <= now() AND", "AND", "TestPrune"},
	{"lease in the pruner", "Prune", "lease_until <= now() AND ", "", "TestPrune"},
	{"recovery point in the pruner", "Prune", " AND recovery_point = ''", "", "TestPrune"},
	{"the pruner's batch bound", "Prune", " AND expires_at < @to", " AND @to::timestamptz IS NOT NULL", "TestPruneBatches"},
	{"the pruner's bound within an instant", "PruneBounds", "lag(expires_at) OVER w = expires_at", "false", "TestPruneBatches/an_instant_across_a_bound"},
	{"the pruner's bounded wait for held rows", "Prune", "set_config('lock_timeout', @lock_timeout, true)", "@lock_timeout::text", "TestPruneSkipsLockedBatch/spread"},
	{"retention in the pruner's skipping batch", "PruneSkipping", "expires_at <= now() AND ", "", "TestPruneSkipsLockedBatch"},
	{"lease in the pruner's skipping batch", "PruneSkipping", "lease_until <= now() AND ", "", "TestPruneSkipsLockedBatch"},
	{"recovery point in the pruner's skipping batch", "PruneSkipping", " AND recovery_point = ''", "", "TestHalfDoneRecordOutlivesRetention/*/*/pruner"},
	{"skipping locked rows in the pruner", "PruneSkipping", " SKIP LOCKED", "", "TestPruneSkipsLockedBatch/spread"},
	{"the claim's bounded wait", "Claim", "set_config('lock_timeout', @lock_timeout,", "set_config('idemgen.unused', @lock_timeout,", "TestDuplicateWaitIsBounded"},
	{"the record-last insert's bounded wait", "InsertCompleted", "set_config('lock_timeout', @lock_timeout,", "set_config('idemgen.unused', @lock_timeout,", "TestDuplicateWaitIsBounded/last/*"},
	{"retention from progress in advance", "Advance", "GREATEST(expires_at, clock_timestamp() + @retention_us::bigint * interval '1 microsecond')", "expires_at + 0 * @retention_us::bigint * interval '1 microsecond'", "TestRetentionRunsFromProgress"},
	{"retention from completion", "Complete", "expires_at = clock_timestamp() + @retention_us::bigint * interval '1 microsecond'", "expires_at = expires_at + 0 * @retention_us::bigint * interval '1 microsecond'", "TestRetentionRunsFromProgress"},
	{"lease in the operator's delete", "ResolveDelete", " AND lease_until <= now()", "", "TestAbandonedAndResolve"},
	{"lease in the operator's completion", "ResolveComplete", " AND lease_until <= now()", "", "TestResolveRechecksLease"},
	{"the completer's attempt bound", "AbandonedBackground", " AND attempts < @max_attempts", " AND @max_attempts::int IS NOT NULL", "TestPanicInPhase/*/*/background_completer"},
	{"the fence's abort in advance", "Advance", "SELECT 1 / count(*) FROM advanced", "SELECT count(*) FROM advanced", "TestFenceWhileTakerRuns/*/*/advance"},
	{"the end of the claim wait", "Claim", "RETURNING set_config('lock_timeout', current_setting('idemgen.lock_timeout'), true)", "RETURNING NULL", "TestPhaseTxContract"},
	{"the end of the record-last insert's wait", "InsertCompleted", "RETURNING set_config('lock_timeout', current_setting('idemgen.lock_timeout'), true)", "RETURNING NULL", "TestPhaseTxContract"},
	{"the fence's abort in complete", "Complete", "SELECT 1 / count(*) FROM completed", "SELECT count(*) FROM completed", "TestFenceWhileTakerRuns/*/*/complete"},
	{"the lease never moved back by advance", "Advance", "GREATEST(lease_until, clock_timestamp() + @lease_us::bigint * interval '1 microsecond')", "clock_timestamp() + @lease_us::bigint * interval '1 microsecond'", "TestCommitNeverMovesALeaseBack"},
	{"the lease never moved back by refresh", "Refresh", "GREATEST(lease_until, clock_timestamp() + @lease_us::bigint * interval '1 microsecond')", "clock_timestamp() + @lease_us::bigint * interval '1 microsecond'", "TestCommitNeverMovesALeaseBack"},
}

// alsoIn names, for a clause that two statements hold so that either alone
// keeps records safe, the other statement and its form of the clause, which
// the mutant removes too.
var alsoIn = map[string]struct{ statement, clause, stand string }{
	"retention in the pruner": {"PruneBounds", " AND expires_at <= now()", ""},
}

const mutantEnv = "IDEMGEN_SQL_MUTANT"

// init, in the child process TestSQLPredicates starts, has every engine of
// the process load its SQL with the named clause removed.
func init() {
	name := os.Getenv(mutantEnv)
	if name == "" {
		return
	}
	for _, p := range predicates {
		if p.name == name {
			sqlRewrite = func(stmt, src string) string {
				if stmt == p.statement {
					src = strings.Replace(src, p.clause, p.stand, 1)
				}
				if o, ok := alsoIn[p.name]; ok && stmt == o.statement {
					src = strings.Replace(src, o.clause, o.stand, 1)
				}
				return src
			}
		}
	}
}

// TestSQLPredicates removes each protecting predicate in turn and runs the
// test named for it in a child process: the test must fail. A predicate
// that no test misses is either redundant (then remove it, or say in
// docs/internals.md what implies it) or untested.
func TestSQLPredicates(t *testing.T) {
	dbtest.NotPlaced(t, "the tests that catch each mutant write records by hand, in the id layout")
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the named tests once per predicate; not in -short")
	}
	dbtest.NotOnCitus(t, "its mutants remove clauses of sql/*.sql on a single PostgreSQL; TestCitusStatementsKeepThePredicates checks that sql/citus keeps each of them")
	src := blockSources(t, "sql/*.sql")
	for _, p := range predicates {
		if strings.Count(src[p.statement], p.clause) != 1 {
			t.Fatalf("%s: %q is not once in statement %s; update the table", p.name, p.clause, p.statement)
		}
		if o, ok := alsoIn[p.name]; ok && strings.Count(src[o.statement], o.clause) != 1 {
			t.Fatalf("%s: %q is not once in statement %s; update the table", p.name, o.clause, o.statement)
		}
	}
	for _, p := range predicates {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel() // each in a process of its own, on a schema of its own
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// Each level of the test's name exactly; * is any name, such
			// as a mode of the protocol suite (inModes).
			var levels []string
			for _, l := range strings.Split(p.test, "/") {
				if l == "*" {
					levels = append(levels, "")
				} else {
					levels = append(levels, "^"+l+"$")
				}
			}
			run := strings.Join(levels, "/")
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", run, "-test.count", "1")
			cmd.Env = append(os.Environ(), mutantEnv+"="+p.name, "DATABASE_URL="+dbtest.URL(t))
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("with %q removed from %s, %s still passes:\n%s", p.clause, p.statement, p.test, out)
			}
			if !strings.Contains(string(out), "--- FAIL: "+strings.SplitN(p.test, "/", 2)[0]) {
				t.Fatalf("with %q removed from %s, %s did not fail as a test:\n%s", p.clause, p.statement, p.test, out)
			}
		})
	}
}

// citusForms is, for a predicate whose statement sql/citus/citus.sql
// replaces, the clause as that replacement writes it ("" where it is the
// same), or why the Citus store keeps it elsewhere.
var citusForms = map[string]struct{ clause, elsewhere string }{
	"retention from progress in advance":       {clause: "GREATEST(expires_at, statement_timestamp() + @retention_us::bigint * interval '1 microsecond')"},
	"retention from completion":                {clause: "expires_at = statement_timestamp() + @retention_us::bigint * interval '1 microsecond'"},
	"the lease never moved back by advance":    {clause: "GREATEST(lease_until, statement_timestamp() + @lease_us::bigint * interval '1 microsecond')"},
	"the lease never moved back by refresh":    {clause: "GREATEST(lease_until, statement_timestamp() + @lease_us::bigint * interval '1 microsecond')"},
	"the claim's bounded wait":                 {elsewhere: "the SET LOCAL lock_timeout of citusWait, sent before the insert"},
	"the record-last insert's bounded wait":    {elsewhere: "the SET LOCAL lock_timeout of citusWait, sent before the insert"},
	"the end of the claim wait":                {elsewhere: "citusRestore, sent after the insert"},
	"the end of the record-last insert's wait": {elsewhere: "citusRestore, sent after the insert"},
	"skipping locked rows in the pruner":       {elsewhere: "none: Citus locks no rows across shards; the batch waits pruneLockWait (citusWait) and fails"},
}

// TestCitusStatementsKeepThePredicates: every protecting clause of a
// statement that sql/citus replaces is in the replacement too, as written
// or in its Citus form (citusForms), or is kept by the Go named there; so
// that TestSQLPredicates' mutants, run on a single PostgreSQL, speak for
// the Citus statements as well.
func TestCitusStatementsKeepThePredicates(t *testing.T) {
	t.Parallel()
	src := blockSources(t, "sql/citus/*.sql")
	for _, p := range predicates {
		replaced, ok := src[p.statement]
		if !ok {
			continue // the same statement on Citus
		}
		form := citusForms[p.name]
		clause := p.clause
		switch {
		case form.elsewhere != "":
			continue
		case form.clause != "":
			clause = form.clause
		}
		if !strings.Contains(replaced, clause) {
			t.Errorf("%s: sql/citus's %s lacks %q; add it, or say in citusForms where Citus keeps it", p.name, p.statement, clause)
		}
	}
	for name := range citusForms {
		found := false
		for _, p := range predicates {
			found = found || p.name == name
		}
		if !found {
			t.Errorf("citusForms names %q, no predicate", name)
		}
	}
}

// blockSources is every block of the files matching glob, by name, as
// written.
func blockSources(t *testing.T, glob string) map[string]string {
	t.Helper()
	src := map[string]string{}
	files, _ := fs.Glob(sqlFiles, glob)
	for _, f := range files {
		text, _ := sqlFiles.ReadFile(f)
		blocks, err := parseBlocks(f, string(text))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			src[b.name] = b.src
		}
	}
	return src
}
