package idem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestResumedForeignCallKeepsItsKey: an execution claimed by an engine
// whose derived keys are 64 characters, resumed by one whose are 40 (a
// rolling deploy that changes Options.DerivedKeyLength while executions
// are in flight), presents the foreign system the key the first attempt
// sent: the length is the record's, not the resuming engine's. In every
// claim mode that runs foreign phases.
func TestResumedForeignCallKeepsItsKey(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var keys []string
		phases := func(fail bool) []idem.Phase[payState] {
			return []idem.Phase[payState]{
				{Name: "charge", Foreign: func(ctx context.Context, key string, s *payState) error {
					keys = append(keys, key)
					if fail {
						return errors.New("the card network timed out") // ambiguous: the charge may exist
					}
					return nil
				}},
				{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
					return created("{}"), nil
				}},
			}
		}
		if _, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), phases(true)); err == nil {
			t.Fatal("the failed foreign call went unnoticed")
		}
		next := mustEngineWith(t, e, idem.Options{DerivedKeyLength: 40})
		out, err := idem.Run(ctx, next, payOp, request("t", "k", "b"), phases(false))
		if err != nil || !out.Resumed {
			t.Fatalf("the retry on the other engine: %+v, %v; want it resumed", out, err)
		}
		if len(keys) != 2 || keys[0] != keys[1] {
			t.Fatalf("the foreign call's keys: %q; want the first attempt's key again", keys)
		}
	})
}
