package idemvet_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemgen/idemgen/idemvet"
)

// The cases live in testdata/src, a GOPATH tree with stubs of pgx,
// pgxpool, uuid, kafka-go and idemgen's runtime. example.com/api holds the
// generated phase interfaces; each other package implements them to
// exercise one rule, so implementations are found through facts, as in a
// user's module.

func TestVetPhaseInterfaces(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), idemvet.Analyzer, "example.com/api")
}

func TestVetTxOnly(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), idemvet.Analyzer, "example.com/txonly")
}

func TestVetTxOnlyFixes(t *testing.T) {
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), idemvet.Analyzer, "example.com/fix")
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
