// Package testshort marks the tests that `go test -short` (make
// test-short, the edit-test loop) leaves out: chaos rounds, the demo story,
// end-to-end builds, waits on real Retry-After values. make test runs them.
package testshort

import "testing"

// Long skips t under -short.
func Long(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("long: runs in make test, not in -short")
	}
}
