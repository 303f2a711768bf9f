package idem_test

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemclient"
)

// TestWeakKeysAreObserved: a request whose key looks weak (a counter, a
// timestamp, a short word) is observed as EventWeakKey, once per request;
// a minted key (a UUIDv7) is not.
func TestWeakKeysAreObserved(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, key := range []string{"42", "order-7", idemclient.NewKey()} {
			if _, err := idem.Run(ctx, e.eng, payOp, request("t", key, "b"), twoPhases(key)); err != nil {
				t.Fatal(err)
			}
		}
		if n := e.ev.count(idem.EventWeakKey); n != 2 {
			t.Errorf("%d weak keys observed; want 2 (42, order-7)", n)
		}
	})
}
