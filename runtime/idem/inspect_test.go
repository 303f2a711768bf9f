package idem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
)

func TestInspect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	if _, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), twoPhases("k")); err != nil {
		t.Fatal(err)
	}
	info, err := idemadmin.Inspect(ctx, e.eng, "createPayment", "t", "k")
	// A completed record keeps what a replay needs: not its operation,
	// recovery point, attempts or age.
	if err != nil || info.State != "completed" || info.Status == nil || *info.Status != 201 || info.Key != "k" ||
		info.Operation != "" || info.RecoveryPoint != "" || info.Attempts != 0 || info.Age != "" {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	if _, err := idemadmin.Inspect(ctx, e.eng, "createPayment", "t", "absent"); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("Inspect of an absent key: %v", err)
	}
}
