package idem_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// lastOp's phases are all local, so the default claim mode runs them first
// and inserts the completed record last (ClaimLast).
var lastOp = &idem.Operation{ID: "last", Policy: idem.Policy{Lease: 30 * time.Second}}

// counted wraps twoPhases so that n counts how often the first phase ran.
func counted(key string, n *atomic.Int64) []idem.Phase[payState] {
	phases := twoPhases(key)
	record := phases[0].Local
	phases[0].Local = func(ctx context.Context, tx pgx.Tx, s *payState) error {
		n.Add(1)
		return record(ctx, tx, s)
	}
	return phases
}

// TestRetryDoesNotRunPhases: a retry of a completed key replays from the
// store and writes nothing, even with no cache in front of it. In last
// mode an engine reads nothing before the phases: a retry runs them, its
// record's insert finds the key held, everything rolls back, and the
// claim, decided again, reads the key and replays; once an engine's
// recent claims found their keys held often, it reads each key first, and
// the phases do not run at all.
func TestRetryDoesNotRunPhases(t *testing.T) {
	t.Parallel()
	inModes(t, testRetryDoesNotRunPhases)
}

func testRetryDoesNotRunPhases(t *testing.T, e *env) {
	e.eng = mustEngineWith(t, e, idem.Options{ReplayCacheBytes: -1, Observer: e.ev})
	var runs atomic.Int64
	first, err := idem.Run(context.Background(), e.eng, lastOp, request("t", "k", "b"), counted("k", &runs))
	if err != nil || first.Replayed {
		t.Fatalf("first: %+v, %v", first, err)
	}
	last := e.mode.claim == idem.ClaimLast
	const retries = 100
	var lastRuns int64
	for i := range retries {
		before := runs.Load()
		again, err := idem.Run(context.Background(), e.eng, lastOp, request("t", "k", "b"), counted("k", &runs))
		if err != nil || !again.Replayed || !sameResponse(again.Response, first.Response) {
			t.Fatalf("retry %d: %+v, %v; want the replay", i, again, err)
		}
		if n := runs.Load() - before; n > 1 || n == 1 && !last {
			t.Fatalf("retry %d ran the phase %d times; want %s", i, n, map[bool]string{true: "at most once, rolled back", false: "never"}[last])
		}
		if i >= retries-10 {
			lastRuns += runs.Load() - before
		}
	}
	if last && runs.Load() < 2 {
		t.Fatalf("the phase ran %d times in all; want it run, and rolled back, by the first retries, which read nothing first", runs.Load())
	}
	if lastRuns != 0 {
		t.Fatalf("the last 10 of %d retries ran the phase %d times; want none: past a quarter of its claims finding keys held, an engine reads first", retries, lastRuns)
	}
	// A retry that ran the phases and rolled back claimed nothing.
	if n := e.ev.count(idem.EventClaim); n != 1 {
		t.Fatalf("%d claims observed for one execution and %d replays; want 1", n, retries)
	}
	var rows int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM rows WHERE key = 'k'`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("the phase's insert ran %d times (%v); want once", rows, err)
	}
	if _, err := idem.Run(context.Background(), e.eng, lastOp, request("t", "k", "other"), counted("k", &runs)); kindOf(err) != idemtype.KindMismatch {
		t.Fatalf("retry with another body: %v; want 422", err)
	}
}

// TestRetryThatCannotReadAnswersTheStoreFailure: in last mode a retry of a
// completed key runs the phases, which may fail on the rows the completed
// execution left; the engine then reads the key to replay its record.
// When that read fails, whether the key is complete is not known: the
// answer is the read's failure, as the store's failures are answered (a
// lost connection is a 503; here the table is gone, which is refused),
// never the phases' error, which would contradict the stored answer.
func TestRetryThatCannotReadAnswersTheStoreFailure(t *testing.T) {
	t.Parallel()
	e := newEnvIn(t, mode{idem.ClaimLast, modes[0].exec}, idem.Options{})
	e.eng = mustEngineWith(t, e, idem.Options{ReplayCacheBytes: -1})
	ctx := context.Background()
	first, err := idem.Run(ctx, e.eng, lastOp, request("t", "k", "b"), twoPhases("k"))
	if err != nil || first.Replayed {
		t.Fatalf("first: %+v, %v", first, err)
	}
	// The retry's phase fails as a phase does on the completed rows, and
	// the records table is out of reach while the engine looks.
	failing := []idem.Phase[payState]{{Name: "record", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
		if _, err := e.pool.Exec(ctx, `ALTER TABLE records RENAME TO records_away`); err != nil {
			t.Error(err)
		}
		return nil, idem.Release(errors.New("the payment exists already"))
	}}}
	_, err = idem.Run(ctx, e.eng, lastOp, request("t", "k", "b"), failing)
	if _, rerr := e.pool.Exec(ctx, `ALTER TABLE records_away RENAME TO records`); rerr != nil {
		t.Fatal(rerr)
	}
	if k := kindOf(err); k != idemtype.KindUnavailable && k != idemtype.KindFailed || !strings.Contains(err.Error(), "reading the existing record") {
		t.Fatalf("retry whose look failed: %v (kind %q); want the read's failure, as the store's failures are answered", err, kindOf(err))
	}
	again, err := idem.Run(ctx, e.eng, lastOp, request("t", "k", "b"), twoPhases("k"))
	if err != nil || !again.Replayed || !sameResponse(again.Response, first.Response) {
		t.Fatalf("retry once the table is back: %+v, %v; want the replay", again, err)
	}
}

// TestClaimLastNeedsLocalPhases: ClaimLast on an operation with a foreign
// phase is refused before anything runs.
func TestClaimLastNeedsLocalPhases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	op := &idem.Operation{ID: "lastForeign", Policy: idem.Policy{Claim: idem.ClaimLast}}
	phases := []idem.Phase[payState]{
		{Name: "charge", Foreign: func(context.Context, string, *payState) error { return nil }},
		{Name: "finish", Final: func(context.Context, pgx.Tx, *payState) (*idem.Response, error) { return created("{}"), nil }},
	}
	if _, err := idem.Run(context.Background(), e.eng, op, request("t", "k", "b"), phases); err == nil {
		t.Fatal("ClaimLast with a foreign phase ran")
	}
}

// TestLastBeginTravelsWithTheFirstStatement: a last-mode execution's BEGIN
// is sent with the phase's first statement, whichever way the phase sends
// it. Each path inserts a row and then fails: the row must roll back,
// which it would not had it run outside the transaction. And each path
// works: the same statement, then success, commits one row and the record.
func TestLastBeginTravelsWithTheFirstStatement(t *testing.T) {
	t.Parallel()
	const insert = `INSERT INTO rows (key) VALUES ($1)`
	paths := map[string]func(ctx context.Context, tx pgx.Tx, key string) error{
		"Exec": func(ctx context.Context, tx pgx.Tx, key string) error {
			_, err := tx.Exec(ctx, insert, key)
			return err
		},
		"Query": func(ctx context.Context, tx pgx.Tx, key string) error {
			rows, err := tx.Query(ctx, insert+` RETURNING key`, key)
			if err != nil {
				return err
			}
			_, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		},
		"QueryRow": func(ctx context.Context, tx pgx.Tx, key string) error {
			var k string
			return tx.QueryRow(ctx, insert+` RETURNING key`, key).Scan(&k)
		},
		"exec mode": func(ctx context.Context, tx pgx.Tx, key string) error {
			_, err := tx.Exec(ctx, insert, pgx.QueryExecModeSimpleProtocol, key)
			return err
		},
		"SendBatch": func(ctx context.Context, tx pgx.Tx, key string) error {
			b := &pgx.Batch{}
			b.Queue(insert, key)
			return tx.SendBatch(ctx, b).Close()
		},
		"CopyFrom": func(ctx context.Context, tx pgx.Tx, key string) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"rows"}, []string{"key"}, pgx.CopyFromRows([][]any{{key}}))
			return err
		},
		"Conn": func(ctx context.Context, tx pgx.Tx, key string) error {
			_, err := tx.Conn().Exec(ctx, insert, key)
			return err
		},
		"savepoint": func(ctx context.Context, tx pgx.Tx, key string) error {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := sp.Exec(ctx, insert, key); err != nil {
				return err
			}
			return sp.Commit(ctx)
		},
	}
	for name, send := range paths {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			phases := func(fail bool) []idem.Phase[payState] {
				return []idem.Phase[payState]{{Name: "only", Final: func(ctx context.Context, tx pgx.Tx, _ *payState) (*idem.Response, error) {
					if err := send(ctx, tx, "k"); err != nil {
						return nil, err
					}
					if fail {
						return nil, idem.Release(errors.New("declined"))
					}
					return created(`{}`), nil
				}}}
			}
			if _, err := idem.Run(context.Background(), e.eng, lastOp, request("t", "k", "b"), phases(true)); err == nil {
				t.Fatal("the failing execution succeeded")
			}
			if n := e.count(`SELECT count(*) FROM rows`); n != 0 {
				t.Fatalf("%d rows after a failed execution: the statement ran outside its transaction", n)
			}
			if out, err := idem.Run(context.Background(), e.eng, lastOp, request("t", "k", "b"), phases(false)); err != nil || out.Replayed {
				t.Fatalf("execution: %+v, %v", out, err)
			}
			if n := e.count(`SELECT count(*) FROM rows`); n != 1 {
				t.Fatalf("%d rows; want 1", n)
			}
			if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records WHERE owner_token IS NULL`); n != 1 {
				t.Fatalf("%d completed records; want 1", n)
			}
		})
	}
}

// TestLastWithoutStatements: phases that send no statement still store
// their answer.
func TestLastWithoutStatements(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	phases := []idem.Phase[payState]{{Name: "only", Final: func(context.Context, pgx.Tx, *payState) (*idem.Response, error) {
		return created(`{"static":true}`), nil
	}}}
	first, err := idem.Run(context.Background(), e.eng, lastOp, request("t", "k", "b"), phases)
	if err != nil {
		t.Fatal(err)
	}
	cold := mustEngineWith(t, e, idem.Options{Schema: e.schema, ReplayCacheBytes: -1})
	again, err := idem.Run(context.Background(), cold, lastOp, request("t", "k", "b"), phases)
	if err != nil || !again.Replayed || !sameResponse(again.Response, first.Response) {
		t.Fatalf("replay: %+v, %v", again, err)
	}
}

// TestEngineClaimMode: Options.Claim sets the mode of operations whose
// policy leaves it auto. With ClaimSeparate, the claim is committed (and
// visible to others) while the phase runs; by default nothing is.
func TestEngineClaimMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		claim   idem.ClaimMode
		visible int
	}{{idem.ClaimAuto, 0}, {idem.ClaimSeparate, 1}} {
		t.Run(string(tc.claim), func(t *testing.T) {
			e := newEnv(t)
			e.eng = mustEngineWith(t, e, idem.Options{Schema: e.schema, Claim: tc.claim})
			seen := -1
			phases := []idem.Phase[payState]{{Name: "only", Final: func(context.Context, pgx.Tx, *payState) (*idem.Response, error) {
				seen = e.count(`SELECT count(*) FROM ` + e.schema + `.records WHERE owner_token IS NOT NULL`)
				return created(`{}`), nil
			}}}
			if _, err := idem.Run(context.Background(), e.eng, lastOp, request("t", "k", "b"), phases); err != nil {
				t.Fatal(err)
			}
			if seen != tc.visible {
				t.Fatalf("claimed records seen during the phase: %d; want %d", seen, tc.visible)
			}
		})
	}
	if _, err := idem.New(nil, idem.Options{Claim: "sometimes"}); err == nil {
		t.Fatal("an unknown Options.Claim was accepted")
	}
}

// TestLastFirstStatementFailsBeforeBegin: a ClaimLast phase's first
// statement carries the transaction's BEGIN. When that statement fails
// before BEGIN reaches the server (it does not even prepare), a phase that
// goes on regardless must still be inside the transaction: its later
// writes roll back with it, and none of them autocommits.
func TestLastFirstStatementFailsBeforeBegin(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"exec", "query", "batch", "savepoint", "copy"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			phases := []idem.Phase[payState]{{Name: "only", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
				var err error
				switch how {
				case "exec":
					_, err = tx.Exec(ctx, `INSERT INTO no_such_table VALUES ($1)`, 1)
				case "query":
					var n int
					err = tx.QueryRow(ctx, `SELECT n FROM no_such_table WHERE n = $1`, 1).Scan(&n)
				case "batch":
					b := &pgx.Batch{}
					b.Queue(`INSERT INTO no_such_table VALUES ($1)`, 1)
					err = tx.SendBatch(ctx, b).Close()
				case "savepoint", "copy": // BEGIN on its own, on a context already done
					done, cancel := context.WithCancel(ctx)
					cancel()
					if how == "savepoint" {
						_, err = tx.Begin(done)
					} else {
						_, err = tx.CopyFrom(done, pgx.Identifier{"rows"}, []string{"key"}, pgx.CopyFromRows([][]any{{"x"}}))
					}
				}
				if err == nil {
					t.Error("the first statement succeeded")
				}
				if _, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ('ignored the error')`); err != nil {
					return nil, err
				}
				return nil, errors.New("the phase fails after all")
			}}}
			if _, err := idem.Run(context.Background(), e.eng, lastOp, request("t", "k", "b"), phases); err == nil {
				t.Fatal("the run succeeded")
			}
			if n := e.count(`SELECT count(*) FROM rows`); n != 0 {
				t.Fatalf("%d rows committed by a phase that failed: its statements ran outside the transaction", n)
			}
			if n := e.count(`SELECT count(*) FROM records`); n != 0 {
				t.Fatalf("%d records left", n)
			}
		})
	}
}

// TestLastFirstStatementScanFails: when scanning the first statement's
// rows fails (as pgx's rows, they close on it), the round trip that
// carried BEGIN ends with them, and the phase's next statement runs in its
// transaction. A first statement that cannot be sent still returns rows
// (closed, with the error), as pgx's Query does, for pgx.CollectRows.
func TestLastFirstStatementScanFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	phases := []idem.Phase[payState]{{Name: "only", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
		rows, err := tx.Query(ctx, `SELECT 'not a number' FROM generate_series(1, $1::int)`, 2)
		if err != nil {
			return nil, err
		}
		var n int
		if !rows.Next() || rows.Scan(&n) == nil {
			t.Error("text scanned into an int")
		}
		// No rows.Next or rows.Close after the failed scan: pgx's rows
		// are closed by it.
		if rows.Err() == nil {
			t.Error("the rows report no error after a failed scan")
		}
		if _, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ('after the scan')`); err != nil {
			return nil, err
		}
		return &idem.Response{Status: 200}, nil
	}}}
	if _, err := idem.Run(context.Background(), e.eng, lastOp, request("t", "k", "b"), phases); err != nil {
		t.Fatalf("the run failed: %v", err)
	}
	if n := e.count(`SELECT count(*) FROM rows`); n != 1 {
		t.Fatalf("%d rows; want the one inserted after the failed scan", n)
	}

	phases = []idem.Phase[payState]{{Name: "only", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
		rows, err := tx.Query(ctx, `SELECT n FROM no_such_table WHERE n = $1`, 1)
		if err == nil {
			t.Error("a query on a missing table succeeded")
		}
		if _, cerr := pgx.CollectRows(rows, pgx.RowTo[int]); cerr == nil {
			t.Error("CollectRows on the failed query's rows succeeded")
		}
		return nil, err
	}}}
	if _, err := idem.Run(context.Background(), e.eng, lastOp, request("t", "k2", "b"), phases); err == nil {
		t.Fatal("the run succeeded")
	}
}
