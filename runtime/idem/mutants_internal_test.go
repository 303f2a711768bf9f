package idem

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/internal/dbtest"
)

// predicates lists every predicate of the engine's SQL that protects a
// record, with the test that fails when it is removed. docs/runtime.md
// carries the same table.
var predicates = []struct {
	name      string
	statement func(*queries) *string
	predicate string // removed from the statement by the mutant...
	stand     string // ...and replaced by this, which keeps its parameter typed
	test      string
}{
	{"owner token in advance's fence", func(q *queries) *string { return &q.advanceSQL }, " AND owner_token = $2", " AND $2::uuid IS NOT NULL", "TestFenceWhileTakerRuns/advance"},
	{"owner token in complete's fence", func(q *queries) *string { return &q.completeSQL }, " AND owner_token = $2", " AND $2::uuid IS NOT NULL", "TestFenceWhileTakerRuns/complete"},
	{"owner token in release's fence", func(q *queries) *string { return &q.releaseSQL }, " AND owner_token = $2", " AND $2::uuid IS NOT NULL", "TestFenceWhileTakerRuns/release"},
	{"owner token in yield's fence", func(q *queries) *string { return &q.yieldSQL }, " AND owner_token = $2", " AND $2::uuid IS NOT NULL", "TestFenceWhileTakerRuns/yield"},
	{"owner token in refresh's fence", func(q *queries) *string { return &q.refreshSQL }, " AND owner_token = $2", " AND $2::uuid IS NOT NULL", "TestRefreshIsFenced"},
	{"lease condition in takeover", func(q *queries) *string { return &q.takeoverSQL }, " AND lease_until <= now()", "", "TestTakeoverRechecksLease"},
	{"liveness in the expired-record delete", func(q *queries) *string { return &q.deleteExpiredSQL }, "lease_until <= now() AND ", "", "TestExpiredDeleteRechecksLiveness"},
	{"recovery point in the expired-record delete", func(q *queries) *string { return &q.deleteExpiredSQL }, " AND recovery_point = ''", "", "TestHalfDoneRecordOutlivesRetention/claim_path"},
	{"recovery point in release", func(q *queries) *string { return &q.releaseSQL }, " AND recovery_point = $3", " AND $3::text IS NOT NULL", "TestReleaseAfterLostCommitAck"},
	{"retention in the pruner", func(q *queries) *string { return &q.pruneSQL }, "expires_at <= now()", "true", "TestPrune"},
	{"lease in the pruner", func(q *queries) *string { return &q.pruneSQL }, "lease_until <= now() AND ", "", "TestPrune"},
	{"recovery point in the pruner", func(q *queries) *string { return &q.pruneSQL }, " AND recovery_point = ''", "", "TestPrune"},
	{"the pruner's batch bound", func(q *queries) *string { return &q.pruneSQL }, " AND expires_at < $2", " AND $2::timestamptz IS NOT NULL", "TestPruneBatches"},
	{"the pruner's bound within an instant", func(q *queries) *string { return &q.pruneBoundsSQL }, "lag(expires_at) OVER w = expires_at", "false", "TestPruneBatches/an_instant_across_a_bound"},
	{"the pruner's bounded wait for held rows", func(q *queries) *string { return &q.pruneSQL }, "set_config('lock_timeout', $3, true)", "$3::text", "TestPruneSkipsLockedBatch/spread"},
	{"retention in the pruner's skipping batch", func(q *queries) *string { return &q.pruneSkippingSQL }, "expires_at <= now() AND ", "", "TestPruneSkipsLockedBatch"},
	{"lease in the pruner's skipping batch", func(q *queries) *string { return &q.pruneSkippingSQL }, "lease_until <= now() AND ", "", "TestPruneSkipsLockedBatch"},
	{"recovery point in the pruner's skipping batch", func(q *queries) *string { return &q.pruneSkippingSQL }, " AND recovery_point = ''", "", "TestHalfDoneRecordOutlivesRetention/pruner"},
	{"skipping locked rows in the pruner", func(q *queries) *string { return &q.pruneSkippingSQL }, " SKIP LOCKED", "", "TestPruneSkipsLockedBatch/spread"},
}

// alsoIn names, for a predicate that two statements hold so that either
// alone keeps records safe, the other statement, where the mutant removes
// every occurrence too.
var alsoIn = map[string]func(q *queries) *string{
	"retention in the pruner": func(q *queries) *string { return &q.pruneBoundsSQL },
}

const mutantEnv = "IDEMGEN_SQL_MUTANT"

func init() {
	name := os.Getenv(mutantEnv)
	if name == "" {
		return
	}
	for _, p := range predicates {
		if p.name == name {
			sqlMutant = func(q *queries) {
				s := p.statement(q)
				*s = strings.Replace(*s, p.predicate, p.stand, 1)
				if other, ok := alsoIn[p.name]; ok {
					s := other(q)
					*s = strings.ReplaceAll(*s, p.predicate, p.stand)
				}
			}
		}
	}
}

// TestSQLPredicates removes each protecting predicate in turn and runs the
// test named for it in a child process: the test must fail. A predicate
// that no test misses is either redundant (then remove it, or say in
// docs/runtime.md what implies it) or untested.
func TestSQLPredicates(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the named tests once per predicate; not in -short")
	}
	q := newQueries("s")
	for _, p := range predicates {
		if !strings.Contains(*p.statement(&q), p.predicate) {
			t.Fatalf("%s: %q is not in the statement; update the table", p.name, p.predicate)
		}
	}
	for _, p := range predicates {
		t.Run(p.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			run := "^" + strings.ReplaceAll(p.test, "/", "$/^") + "$"
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", run, "-test.count", "1")
			cmd.Env = append(os.Environ(), mutantEnv+"="+p.name, "DATABASE_URL="+dbtest.URL(t))
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("with %q removed, %s still passes:\n%s", p.predicate, p.test, out)
			}
			if !strings.Contains(string(out), "--- FAIL: "+strings.SplitN(p.test, "/", 2)[0]) {
				t.Fatalf("with %q removed, %s did not fail as a test:\n%s", p.predicate, p.test, out)
			}
		})
	}
}
