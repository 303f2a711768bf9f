package idem

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestReleaseAfterLostCommitAck: a phase's commit went through but its
// acknowledgement was lost (the connection broke during COMMIT), so the
// engine believes nothing committed. The release must then leave the
// record alone: deleting it would let a retry repeat the committed effects.
func TestReleaseAfterLostCommitAck(t *testing.T) {
	t.Parallel()
	pool, schema := dbtest.Pool(t)
	ctx := context.Background()
	dbtest.Migrate(t, pool, schema)
	e, err := New(pool, Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	op := &Operation{ID: "op", Policy: Policy{Lease: 30 * time.Second, Claim: ClaimSeparate}}
	fp := sha256.Sum256([]byte("body"))
	p, _ := e.policy(op)
	c, out, err := e.acquire(ctx, op, p, separateClaim{}, KeyedRequest{Scope: "s", Key: "k", Fingerprint: fp[:]}, false)
	if err != nil || out != nil {
		t.Fatalf("claim: %v %v", out, err)
	}
	// The first phase commits; the engine never hears of it.
	sess, err := e.begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = e.store.commitProgress(ctx, sess.tx.conn, c, "first", []byte(`{}`))
	sess.end()
	if err != nil {
		t.Fatal(err)
	}
	_, ferr := e.fail(c, false, false, errors.New("commit: connection reset by peer"))
	var perr *Error
	if !errors.As(ferr, &perr) || perr.Kind != idemtype.KindFailed {
		t.Fatalf("fail = %v; want an ambiguous failure", ferr)
	}
	info, err := admin{e}.Inspect(ctx, "op", "s", "k")
	if err != nil || info.State != stateClaimed || info.RecoveryPoint != "first" {
		t.Fatalf("record after the refused release: %+v, %v; want it claimed at 'first'", info, err)
	}
}
