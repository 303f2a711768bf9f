package idem_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestFinalResponseIsCheckedBeforeItIsStored: a final phase that returns
// no response, or a response with a status net/http cannot write as a
// final one (0, as a Response left unset has it, or 1xx), fails as the
// phase's error before anything of it is stored: its writes roll back,
// the key is neither stranded (a retry at once is not 409) nor poisoned
// with an answer every replay of which would panic the handler. In every
// claim mode, alone and after a foreign phase, where the final phase
// commits in a transaction of its own.
func TestFinalResponseIsCheckedBeforeItIsStored(t *testing.T) {
	for _, bad := range []struct {
		name string
		resp *idem.Response
	}{
		{"no response", nil},
		{"status 0", &idem.Response{Body: []byte("{}")}},
		{"status 102", &idem.Response{Status: 102}},
	} {
		t.Run(bad.name, func(t *testing.T) {
			inModes(t, func(t *testing.T, e *env) {
				for _, afterForeign := range []bool{false, true} {
					key := map[bool]string{false: "alone", true: "after-foreign"}[afterForeign]
					phases := func(resp *idem.Response) []idem.Phase[payState] {
						p := []idem.Phase[payState]{{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
							if _, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ($1)`, key); err != nil {
								return nil, err
							}
							return resp, nil
						}}}
						if afterForeign {
							p = committedFirst(p)
						}
						return p
					}
					ctx := context.Background()
					if _, err := idem.Run(ctx, e.eng, payOp, request("t", key, "b"), phases(bad.resp)); err == nil {
						t.Fatalf("%s: a final phase's %s was accepted", key, bad.name)
					}
					if n := e.count(`SELECT count(*) FROM rows WHERE key = $1`, key); n != 0 {
						t.Errorf("%s: the failed final phase's row committed (%d)", key, n)
					}
					out, err := idem.Run(ctx, e.eng, payOp, request("t", key, "b"), phases(created(`{"ok":true}`)))
					if err != nil || out.Response.Status != 201 || out.Replayed {
						t.Fatalf("%s: the retry at once: %+v, %v; want it to execute and answer 201", key, out, err)
					}
					if n := e.count(`SELECT count(*) FROM rows WHERE key = $1`, key); n != 1 {
						t.Errorf("%s: %d rows after the retry, want 1", key, n)
					}
				}
			})
		})
	}
}
