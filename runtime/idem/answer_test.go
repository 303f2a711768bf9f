package idem_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestPhaseBeforeTheLastAnswers: a local or foreign phase before the last
// ends the execution with idem.Answer (a 404 for an order that is not
// there, a 409): the answer is stored and replayed, what the local phase
// wrote commits with it, and no later phase runs. In every claim mode, and
// after a foreign phase (its own transaction).
func TestPhaseBeforeTheLastAnswers(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, tc := range []struct {
			key     string
			foreign bool // the answering phase is foreign
			first   bool // a foreign phase comes before it
		}{{"local", false, false}, {"local-after-foreign", false, true}, {"foreign", true, false}} {
			later := 0
			answer := &idem.Response{Status: 404, Body: []byte(`{"title":"no such order"}`)}
			phases := []idem.Phase[payState]{
				{Name: "finish", Final: func(context.Context, pgx.Tx, *payState) (*idem.Response, error) {
					later++
					return created(`{}`), nil
				}},
			}
			check := idem.Phase[payState]{Name: "check", Local: func(ctx context.Context, tx pgx.Tx, _ *payState) error {
				if _, err := tx.Exec(ctx, `INSERT INTO rows (key, note) VALUES ($1, 'looked')`, tc.key); err != nil {
					return err
				}
				return idem.Answer(answer)
			}}
			if tc.foreign {
				check = idem.Phase[payState]{Name: "check", Foreign: func(context.Context, string, *payState) error {
					return idem.Answer(answer)
				}}
			}
			phases = append([]idem.Phase[payState]{check}, phases...)
			if tc.first {
				phases = committedFirst(phases)
			}
			for i := range 2 {
				out, err := idem.Run(ctx, e.eng, payOp, request("t", tc.key, "b"), phases)
				if err != nil || out.Response.Status != 404 || string(out.Response.Body) != string(answer.Body) || out.Replayed != (i == 1) {
					t.Fatalf("%s, attempt %d: %+v, %v; want the phase's 404, replayed the second time", tc.key, i, out, err)
				}
			}
			if later != 0 {
				t.Errorf("%s: the final phase ran after an answer", tc.key)
			}
			want := 1
			if tc.foreign {
				want = 0
			}
			if n := e.count(`SELECT count(*) FROM rows WHERE key = $1`, tc.key); n != want {
				t.Errorf("%s: %d rows, want %d: the answering phase's writes commit with its answer", tc.key, n, want)
			}
		}
		if err := idem.Answer(nil); err == nil || idem.Answered(err) != nil {
			t.Errorf("Answer(nil): %v; want an error that is no answer", err)
		}
	})
}
