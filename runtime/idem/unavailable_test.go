package idem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestStoreUnavailable: a claim that cannot reach the store is a 503
// problem, not an opaque error, and nothing is left behind.
func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool.Close()
	_, err := idem.Run(context.Background(), e.eng, payOp, request("t", "k", "b"), twoPhases("k"))
	if kindOf(err) != idemtype.KindUnavailable {
		t.Fatalf("err %v; want unavailable", err)
	}
	var perr *idem.Error
	if !errors.As(err, &perr) || perr.Status() != 503 || perr.RetryAfter <= 0 {
		t.Fatalf("err %#v; want 503 with Retry-After", err)
	}
}
