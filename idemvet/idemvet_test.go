package idemvet_test

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemgen/idemgen/idemvet"
)

// The cases live in testdata/src, a GOPATH tree with stubs of pgx (and
// its pgconn and pgxpool), uuid, kafka-go and idemgen's runtime, and of a
// service's dependencies: clients of other systems (cardnet, psp, sdk),
// what sqlc generates (db), a logger and metrics (telemetry).
// example.com/api holds the generated phase interfaces; each other package
// implements them to exercise one rule, so implementations are found
// through facts, as in a user's module.

func TestVetPhaseInterfaces(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), idemvet.Analyzer, "example.com/api")
}

// example.com/handles reaches the database through sqlc's DBTX and
// Queries.
func TestVetTxOnly(t *testing.T) {
	noIdleFixes(t, analysistest.Run(t, analysistest.TestData(), idemvet.Analyzer, "example.com/txonly", "example.com/handles"))
}

func TestVetTxOnlyFixes(t *testing.T) {
	noIdleFixes(t, analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), idemvet.Analyzer, "example.com/fix"))
}

// noIdleFixes checks that every suggested fix changes the code: one that
// replaces tx with tx fixes nothing.
func noIdleFixes(t *testing.T, results []*analysistest.Result) {
	t.Helper()
	for _, r := range results {
		for _, d := range r.Diagnostics {
			for _, fix := range d.SuggestedFixes {
				for _, e := range fix.TextEdits {
					tf := r.Pass.Fset.File(e.Pos)
					src, err := os.ReadFile(tf.Name())
					if err != nil {
						t.Fatal(err)
					}
					if old := src[tf.Offset(e.Pos):tf.Offset(e.End)]; bytes.Equal(old, e.NewText) {
						t.Errorf("%s: %q: fix %q replaces %q with itself", r.Pass.Fset.Position(d.Pos), d.Message, fix.Message, old)
					}
				}
			}
		}
	}
}

func TestVetNoNetworkInLocal(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), idemvet.Analyzer, "example.com/network")
}

func TestVetForeign(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), idemvet.Analyzer, "example.com/foreign")
}

func TestVetTxEscape(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), idemvet.Analyzer, "example.com/escape")
}

func TestVetDirective(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), idemvet.Analyzer, "example.com/directive")
}

func TestVetGeneric(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), idemvet.Analyzer, "example.com/generic")
}

// TestVetStateOrder: a phase that reads a state field no earlier phase in
// the spec's order writes (two phases swapped in the spec) is reported;
// the same bodies in the right order, and a phase that hands its whole
// state to a decoder, are not.
func TestVetStateOrder(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), idemvet.Analyzer, "example.com/stateorder")
}

// TestVetSteps: a handler's steps that a resumed run could not find again
// (a name that is not a constant or repeats, a step in a loop, a step
// decided by the clock or randomness) are reported; steps decided from the
// request and a step's result are not.
func TestVetSteps(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), idemvet.Analyzer, "example.com/steps")
}

// TestVetSafeMethod: the handler of a GET, HEAD or OPTIONS operation, found
// by the routes in the comments of oapi-codegen's StrictServerInterface or
// idemgen's PlainHandlers, that writes to the database (directly, through
// a transaction, sqlc's queries or a helper) or calls another system with
// POST or PUT is reported with its operation and line; a handler that only
// reads (a locking SELECT, SET LOCAL, a batch of reads, GETs to another
// system), a POST that writes, and an interface of the service's own are
// not.
func TestVetSafeMethod(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), idemvet.Analyzer, "example.com/webapi", "example.com/safemethod")
}
