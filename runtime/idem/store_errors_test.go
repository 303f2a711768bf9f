package idem_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// refuse makes the records table refuse the statements of event (INSERT
// or UPDATE) with SQLSTATE 0A000, as Citus refuses a statement it cannot
// run on a distributed table: a deterministic error, which the server
// gives again on every retry.
func (e *env) refuse(event string) {
	e.t.Helper()
	e.raiseOn(event, "feature_not_supported", "refused by the test")
}

// unraise drops raiseOn's trigger, as Citus takes it (see raiseOn).
func (e *env) unraise() {
	e.t.Helper()
	err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		if dbtest.Citus() {
			if _, err := tx.Exec(context.Background(), `SET LOCAL citus.enable_unsafe_triggers = on`); err != nil {
				return err
			}
		}
		_, err := tx.Exec(context.Background(), `DROP TRIGGER refuse ON `+e.schema+`.records`)
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// raiseOn makes the records table fail the statements of event (INSERT,
// UPDATE or DELETE) with the condition errcode and message, through a
// trigger, which Citus takes on a distributed table when told it is safe.
func (e *env) raiseOn(event, errcode, message string) {
	e.t.Helper()
	e.exec(`CREATE FUNCTION ` + e.schema + `.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION '` + message + `' USING ERRCODE = '` + errcode + `'; END $$`)
	err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		if dbtest.Citus() {
			// Citus makes triggers on a distributed table's shards only
			// when told they are safe there.
			if _, err := tx.Exec(context.Background(), `SET LOCAL citus.enable_unsafe_triggers = on`); err != nil {
				return err
			}
		}
		_, err := tx.Exec(context.Background(), `CREATE TRIGGER refuse BEFORE `+event+` ON `+e.schema+`.records FOR EACH ROW EXECUTE FUNCTION `+e.schema+`.refuse()`)
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// TestStoreErrorSaysWhatFailed: a statement of the store that the server
// refuses is logged once, with the operation, the step, the statement's
// name, its SQLSTATE and the server's message; and a deterministic refusal
// (0A000, as Citus gives for a statement it cannot run) is answered as no
// outage: not "did not answer", not 503, no Retry-After. On the claim in
// every claim mode (in ClaimLast the record is inserted with the commit),
// and on a phase's commit.
func TestStoreErrorSaysWhatFailed(t *testing.T) {
	for _, m := range modes {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				name, event string
				phases      func(string) []idem.Phase[payState]
				stmt, step  string
				msg         string // the log line's
			}{
				{"claim", "INSERT", twoPhases, map[idem.ClaimMode]string{idem.ClaimLast: "InsertCompleted"}[m.claim], "claim", "idem: store error"},
				{"commit", "UPDATE", func(k string) []idem.Phase[payState] { return committedFirst(twoPhases(k)) }, "Advance", "commit", "idem: execution failed"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					logs := &logLines{}
					e := newEnvIn(t, m, idem.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
					stmt, msg := tc.stmt, tc.msg
					if stmt == "" {
						stmt = "Claim"
					}
					if m.claim == idem.ClaimLast && tc.name == "claim" {
						msg = "idem: execution failed" // the insert is the commit's
					}
					e.refuse(tc.event)
					_, err := idem.Run(context.Background(), e.eng, payOp, request("t", "k-"+tc.name, "b"), tc.phases("k-"+tc.name))
					var ie *idem.Error
					switch {
					case err == nil:
						t.Fatal("the refused statement went unnoticed")
					case strings.Contains(err.Error(), "did not answer"):
						t.Errorf("a deterministic refusal answered as an outage: %v", err)
					}
					if errors.As(err, &ie) && (ie.Kind == idemtype.KindUnavailable || ie.RetryAfter != 0) {
						t.Errorf("answered %s with Retry-After %v: a client would retry forever", ie.Kind, ie.RetryAfter)
					}
					lines := logs.records(t, msg)
					if len(lines) != 1 {
						t.Fatalf("%d lines %q, want 1; log:\n%s", len(lines), msg, logs.buf.String())
					}
					l := lines[0]
					want := map[string]any{"operation": payOp.ID, "statement": stmt, "sqlstate": "0A000", "message": "refused by the test"}
					if msg == "idem: store error" {
						want["step"] = tc.step
					}
					for k, v := range want {
						if l[k] != v {
							t.Errorf("log line's %s = %v, want %v; line: %v", k, l[k], v, l)
						}
					}
				})
			}
		})
	}
}

// TestRefusedCommitRunsThePhasesOnce: a COMMIT refused with SQLSTATE
// 0A000 by something other than a stale prepared statement (a deferred
// trigger of the phases' own table) is the phase's error: the phases ran
// once and are not run again as if the statement had been stale.
func TestRefusedCommitRunsThePhasesOnce(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		e.exec(`CREATE FUNCTION ` + e.schema + `.refuse_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'deferred refusal' USING ERRCODE = 'feature_not_supported'; END $$`)
		e.exec(`CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON ` + e.schema + `.rows DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION ` + e.schema + `.refuse_rows()`)
		var runs atomic.Int32
		phases := twoPhases("k")
		local := phases[0].Local
		phases[0].Local = func(ctx context.Context, tx pgx.Tx, s *payState) error {
			runs.Add(1)
			return local(ctx, tx, s)
		}
		_, err := idem.Run(context.Background(), e.eng, payOp, request("t", "k", "b"), phases)
		if err == nil || !strings.Contains(err.Error(), "deferred refusal") {
			t.Errorf("Run: %v, want the COMMIT's refusal", err)
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("the phase ran %d times, want once", n)
		}
		if n := e.count(`SELECT count(*) FROM rows`); n != 0 {
			t.Errorf("%d business rows committed", n)
		}
	})
}
