package idem_test

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idem"
)

// TestTakeoverAcrossAFailover: a record last written on another timeline
// than the primary's (as after a standby's promotion) is reported when an
// execution takes it over; one written on this timeline is not. The
// timeline is set back by hand: promoting a standby is make topology's.
func TestTakeoverAcrossAFailover(t *testing.T) {
	dbtest.NotOnCitus(t, "the records of a distributed table live on workers, whose timeline the coordinator cannot record in them (docs/scaling.md)")
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, tc := range []struct {
			key     string
			crossed bool
		}{{"same-timeline", false}, {"crossed", true}} {
			cd := &card{charges: map[string]string{}}
			runs := 0
			done := make(chan struct{})
			go func() {
				defer close(done)
				idem.Run(ctx, e.eng, payOp, request("t", tc.key, "b"), threePhases(tc.key, cd, &runs, "after-charge"))
			}()
			<-done
			if tc.crossed {
				e.exec(`UPDATE ` + e.schema + `.records SET timeline = timeline + 1 WHERE owner_token IS NOT NULL`)
			}
			before := e.ev.count(idem.EventPrimaryChanged)
			e.expireLeases()
			out, err := idem.Run(ctx, e.eng, payOp, request("t", tc.key, "b"), threePhases(tc.key, cd, &runs, ""))
			if err != nil || !out.Resumed {
				t.Fatalf("%s: the takeover = %+v, %v; want a resumed execution", tc.key, out, err)
			}
			if got := e.ev.count(idem.EventPrimaryChanged) - before; got != map[bool]int{false: 0, true: 1}[tc.crossed] {
				t.Fatalf("%s: %d primary_changed events; want %t", tc.key, got, tc.crossed)
			}
		}
		// The record's timeline is the primary's after each recovery point,
		// and gone once it completes.
		var n int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.schema+`.records WHERE timeline IS NOT NULL`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d completed records keep a timeline (%v); want none", n, err)
		}
	})
}
