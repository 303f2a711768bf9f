package idemprom_test

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemprom"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestReconcileCollector: idemgen_natural_key_duplicates counts the natural
// keys completed under more than one idempotency key within the window,
// read again once Every has passed; an intent executed once, or replayed,
// counts nothing.
func TestReconcileCollector(t *testing.T) {
	t.Parallel()
	pool, schema := dbtest.Pool(t)
	dbtest.Migrate(t, pool, schema)
	eng, err := idem.New(pool, idem.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	op := &idem.Operation{ID: "pay", Policy: idem.Policy{Lease: 10 * time.Second}}
	pay := func(key, ref string) {
		t.Helper()
		sum := sha256.Sum256([]byte(ref))
		req := idem.KeyedRequest{Scope: "s", Key: key, Fingerprint: sum[:], NaturalKey: idemtype.NaturalKeyDigest(op.ID, []string{ref})}
		_, err := idem.Run(context.Background(), eng, op, req, []idem.Phase[struct{}]{{Name: "pay",
			Final: func(context.Context, pgx.Tx, *struct{}) (*idem.Response, error) {
				return &idem.Response{Status: 201}, nil
			}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(idemprom.NewReconcileCollector(eng, idemprom.ReconcileOptions{Every: time.Nanosecond}))
	want := func(n string) {
		t.Helper()
		err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP idemgen_natural_key_duplicates Natural keys (x-idempotency natural-key) that more than one record completed within the window keeps: intents executed under more than one idempotency key (idemgen reconcile lists them).
# TYPE idemgen_natural_key_duplicates gauge
idemgen_natural_key_duplicates `+n+`
`), "idemgen_natural_key_duplicates")
		if err != nil {
			t.Error(err)
		}
	}
	pay("a", "order-1")
	pay("a", "order-1") // a replay
	want("0")
	pay("b", "order-1") // another key, the same intent
	pay("c", "order-2")
	want("1")
	pay("d", "order-2")
	want("2")
	reg = prometheus.NewRegistry()
	reg.MustRegister(idemprom.NewReconcileCollector(eng, idemprom.ReconcileOptions{Window: time.Nanosecond, Every: time.Nanosecond}))
	want("0") // a window of a nanosecond
}
