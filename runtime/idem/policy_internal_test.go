package idem

import (
	"strings"
	"testing"
	"time"
)

// TestLeaseCeilingIsRefused: a lease longer than PostgreSQL's timeouts can
// hold (statement_timeout, lock_timeout and
// idle_in_transaction_session_timeout count milliseconds in 32 bits, about
// 24.8 days), which bound a claim's open transaction by the lease, is
// refused when the policy is validated, not met as a failed claim.
func TestLeaseCeilingIsRefused(t *testing.T) {
	t.Parallel()
	long := Policy{Lease: 25 * 24 * time.Hour, Retention: 60 * 24 * time.Hour}
	if err := long.validate(); err == nil || !strings.Contains(err.Error(), "longest lease") {
		t.Fatalf("lease %v: %v; want it refused for its length", long.Lease, err)
	}
	ok := Policy{Lease: MaxLease, Retention: 60 * 24 * time.Hour}
	if err := ok.validate(); err != nil {
		t.Fatalf("lease %v (the longest): %v", ok.Lease, err)
	}
}
