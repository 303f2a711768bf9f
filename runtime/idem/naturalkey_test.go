package idem_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestReconcileFindsNaturalDuplicates: in every claim mode, two requests
// of one intent (one natural key) under two idempotency keys both execute,
// and their receipts keep the natural key's digest, never the values;
// idemadmin.Reconcile lists that natural key with its two executions, and
// nothing for an intent executed once, a replay, a request with no
// natural key, or another caller's (scope's) request with the same values. A since after the executions finds nothing; one in the
// future is an error.
func TestReconcileFindsNaturalDuplicates(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		naturalIn := func(scope, key, ref string) idem.KeyedRequest {
			req := request(scope, key, `{"order_ref":"`+ref+`"}`)
			req.NaturalKey = idemtype.NaturalKeyDigest(payOp.ID, []string{ref})
			return req
		}
		natural := func(key, ref string) idem.KeyedRequest { return naturalIn("t", key, ref) }
		start := time.Now().Add(-time.Second)
		for _, r := range []idem.KeyedRequest{
			natural("attempt-1", "order-7"), natural("attempt-2", "order-7"), // a key per attempt: twice
			natural("once", "order-8"), natural("once", "order-8"), // a retry: replayed
			naturalIn("u", "other-caller", "order-7"), // another caller's order-7: another intent
			request("t", "none", "b"),                 // no natural key
		} {
			if _, err := idem.Run(ctx, e.eng, payOp, r, twoPhases(r.Key)); err != nil {
				t.Fatalf("%s: %v", r.Key, err)
			}
		}
		got, err := idemadmin.Reconcile(ctx, e.eng, start, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := idemadmin.NaturalKey(payOp.ID, "t", payOp.ID, []string{"order-7"})
		if len(got) != 1 || got[0].NaturalKey != want || got[0].Executions != 2 || got[0].Last.Before(got[0].First) {
			t.Fatalf("reconcile: %+v; want order-7's key %s with 2 executions", got, want)
		}
		if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records WHERE natural_key IS NOT NULL`); n != 4 {
			t.Errorf("%d receipts keep a natural key; want 4", n)
		}
		if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records AS r WHERE r::text LIKE '%order-7%'`); n != 0 {
			t.Errorf("%d records keep the natural key's value in clear", n)
		}
		if later, err := idemadmin.Reconcile(ctx, e.eng, time.Now(), 0); err != nil || len(later) != 0 {
			t.Errorf("reconcile since now: %+v, %v; want none", later, err)
		}
		if _, err := idemadmin.Reconcile(ctx, e.eng, time.Now().Add(time.Hour), 0); err == nil || !strings.Contains(err.Error(), "in the future") {
			t.Errorf("reconcile since an hour ahead: %v; want an error saying it is in the future", err)
		}
	})
}
