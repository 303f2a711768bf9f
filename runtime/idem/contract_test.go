package idem_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idem"
)

// The phase's pgx.Tx contract (docs/internals.md, "A phase's transaction"):
// whatever the claim mode and the pool's DefaultQueryExecMode, what a phase
// does with its tx has the same effect, and returns the same error, as the
// same calls inside pgx.BeginFunc on the same pool.

// txCase is one phase body of the contract. It writes into the tables of
// contractSchema and notes what it observed (values read, command tags).
type txCase struct {
	name string
	body func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error
}

const contractSchema = `
CREATE TABLE c_rows (v text NOT NULL);
CREATE TABLE c_deferred (v text, CONSTRAINT c_deferred_v UNIQUE (v) DEFERRABLE INITIALLY DEFERRED);
CREATE TABLE c_audit (v text UNIQUE);
CREATE TABLE c_trig (v text);
CREATE FUNCTION c_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO c_audit VALUES (NEW.v); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER c_trig_audit AFTER INSERT ON c_trig DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION c_audit_fn();
CREATE TABLE c_watch (v text);
CREATE FUNCTION c_watch_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO c_rows VALUES ('lock_timeout at commit=' || current_setting('lock_timeout')); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER c_watch_settings AFTER INSERT ON c_watch DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION c_watch_fn();
`

// contractRows is every row the cases can write, in one string.
const contractRows = `SELECT coalesce(string_agg(t || ':' || v, ',' ORDER BY t, v), '') FROM (
    SELECT 'rows' AS t, v FROM c_rows UNION ALL SELECT 'deferred', v FROM c_deferred
    UNION ALL SELECT 'audit', v FROM c_audit UNION ALL SELECT 'trig', v FROM c_trig
    UNION ALL SELECT 'watch', v FROM c_watch) AS s`

const contractReset = `TRUNCATE c_rows, c_deferred, c_audit, c_trig, c_watch`

func insertRow(ctx context.Context, tx pgx.Tx, note *strings.Builder, v string) error {
	tag, err := tx.Exec(ctx, `INSERT INTO c_rows VALUES ($1)`, v)
	fmt.Fprintf(note, "[%s]", tag)
	return err
}

var txCases = []txCase{
	{"exec with arguments", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		return insertRow(ctx, tx, note, "a")
	}},
	{"exec without arguments", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		tag, err := tx.Exec(ctx, `INSERT INTO c_rows VALUES ('a')`)
		fmt.Fprintf(note, "[%s]", tag)
		return err
	}},
	{"exec of several statements", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		tag, err := tx.Exec(ctx, `INSERT INTO c_rows VALUES ('a'); INSERT INTO c_rows VALUES ('b'), ('c')`)
		fmt.Fprintf(note, "[%s]", tag)
		return err
	}},
	{"query with arguments", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		rows, err := tx.Query(ctx, `INSERT INTO c_rows VALUES ($1), ($2) RETURNING upper(v)`, "a", "b")
		if err != nil {
			return err
		}
		vs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		fmt.Fprintf(note, "%v[%s]", vs, rows.CommandTag())
		return err
	}},
	{"query without arguments", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		rows, err := tx.Query(ctx, `SELECT v FROM (VALUES ('x'), ('y')) AS t(v)`)
		if err != nil {
			return err
		}
		vs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		return insertRow(ctx, tx, note, strings.Join(vs, "+"))
	}},
	{"query row", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		var v string
		err := tx.QueryRow(ctx, `INSERT INTO c_rows VALUES ($1) RETURNING upper(v)`, "q").Scan(&v)
		note.WriteString(v)
		return err
	}},
	{"query row without a row", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		var v string
		err := tx.QueryRow(ctx, `SELECT v FROM c_rows WHERE v = $1`, "none").Scan(&v)
		fmt.Fprintf(note, "%v", err)
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		return insertRow(ctx, tx, note, "after no rows")
	}},
	{"statement prepared by name", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		tag, err := tx.Exec(ctx, "c_insert", "p")
		fmt.Fprintf(note, "[%s]", tag)
		if err != nil {
			return err
		}
		var v string
		err = tx.QueryRow(ctx, "c_upper", "q").Scan(&v)
		note.WriteString(v)
		return err
	}},
	{"statement prepared by name without arguments", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		tag, err := tx.Exec(ctx, "c_insert_fixed")
		fmt.Fprintf(note, "[%s]", tag)
		return err
	}},
	{"named arguments", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		tag, err := tx.Exec(ctx, `INSERT INTO c_rows VALUES (@v)`, pgx.NamedArgs{"v": "named"})
		fmt.Fprintf(note, "[%s]", tag)
		return err
	}},
	{"exec mode argument", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		tag, err := tx.Exec(ctx, `INSERT INTO c_rows VALUES ($1)`, pgx.QueryExecModeSimpleProtocol, "simple")
		fmt.Fprintf(note, "[%s]", tag)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `INSERT INTO c_rows VALUES ($1) RETURNING v`, pgx.QueryExecModeExec, "exec")
		if err != nil {
			return err
		}
		vs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		fmt.Fprintf(note, "%v", vs)
		return err
	}},
	{"result formats argument", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		var n int64
		if err := tx.QueryRow(ctx, `SELECT $1::int8 + 1`, pgx.QueryResultFormats{pgx.TextFormatCode}, 41).Scan(&n); err != nil {
			return err
		}
		return insertRow(ctx, tx, note, fmt.Sprint(n))
	}},
	{"batch", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO c_rows VALUES ($1)`, "b1")
		b.Queue(`INSERT INTO c_rows VALUES ('b2')`)
		b.Queue(`SELECT count(*) FROM c_rows`).QueryRow(func(row pgx.Row) error {
			var n int
			err := row.Scan(&n)
			fmt.Fprintf(note, "count %d", n)
			return err
		})
		return tx.SendBatch(ctx, b).Close()
	}},
	{"copy", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		n, err := tx.CopyFrom(ctx, pgx.Identifier{"c_rows"}, []string{"v"}, pgx.CopyFromRows([][]any{{"c1"}, {"c2"}}))
		fmt.Fprintf(note, "copied %d", n)
		return err
	}},
	{"savepoints", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		if err := insertRow(ctx, tx, note, "kept"); err != nil {
			return err
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if err := insertRow(ctx, sp, note, "rolled back"); err != nil {
			return err
		}
		if err := sp.Rollback(ctx); err != nil {
			return err
		}
		sp, err = tx.Begin(ctx)
		if err != nil {
			return err
		}
		if err := insertRow(ctx, sp, note, "released"); err != nil {
			return err
		}
		return sp.Commit(ctx)
	}},
	{"savepoint first", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if err := insertRow(ctx, sp, note, "in savepoint"); err != nil {
			return err
		}
		return sp.Commit(ctx)
	}},
	{"large objects", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		lo := tx.LargeObjects()
		oid, err := lo.Create(ctx, 0)
		if err != nil {
			return err
		}
		obj, err := lo.Open(ctx, oid, pgx.LargeObjectModeRead|pgx.LargeObjectModeWrite)
		if err != nil {
			return err
		}
		if _, err := obj.Write([]byte("large")); err != nil {
			return err
		}
		if _, err := obj.Seek(0, io.SeekStart); err != nil {
			return err
		}
		b, err := io.ReadAll(obj)
		if err != nil {
			return err
		}
		if err := obj.Close(); err != nil {
			return err
		}
		if err := lo.Unlink(ctx, oid); err != nil {
			return err
		}
		return insertRow(ctx, tx, note, string(b))
	}},
	{"the connection", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		tag, err := tx.Conn().Exec(ctx, `INSERT INTO c_rows VALUES ($1)`, "through conn")
		fmt.Fprintf(note, "[%s]", tag)
		return err
	}},
	{"a statement that fails", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		_, err := tx.Exec(ctx, `INSERT INTO c_rows VALUES ($1)`, nil)
		return err
	}},
	{"a first statement that fails, ignored", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		_, err := tx.Exec(ctx, `INSERT INTO c_missing VALUES ($1)`, "x")
		fmt.Fprintf(note, "%s;", sqlStateOf(err))
		return insertRow(ctx, tx, note, "after the failure")
	}},
	{"a later statement that fails, ignored", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		if err := insertRow(ctx, tx, note, "before"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO c_rows VALUES ($1)`, nil)
		fmt.Fprintf(note, "%s;", sqlStateOf(err))
		return insertRow(ctx, tx, note, "after the failure")
	}},
	{"a first batch that fails, ignored", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO c_missing VALUES ($1)`, "x")
		fmt.Fprintf(note, "%s;", sqlStateOf(tx.SendBatch(ctx, b).Close()))
		return insertRow(ctx, tx, note, "after the failure")
	}},
	{"a first prepare that fails, ignored", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		_, err := tx.Prepare(ctx, "c_bad", `INSERT INTO c_missing VALUES ($1)`)
		fmt.Fprintf(note, "%s;", sqlStateOf(err))
		return insertRow(ctx, tx, note, "after the failure")
	}},
	{"a batch that begins a transaction", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		b := &pgx.Batch{}
		b.BeginTx(pgx.TxOptions{})
		b.Queue(`INSERT INTO c_rows VALUES ($1)`, "in batch")
		br := tx.SendBatch(ctx, b)
		fmt.Fprintf(note, "%v;", br.Close())
		return insertRow(ctx, tx, note, "after the batch")
	}},
	{"named arguments, then an exec mode", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		rows, err := tx.Query(ctx, `INSERT INTO c_rows VALUES (@v) RETURNING v`, pgx.NamedArgs{"v": "named"}, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			return err
		}
		vs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		fmt.Fprintf(note, "%v", vs)
		return err
	}},
	{"named arguments that leave none, several statements", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		tag, err := tx.Exec(ctx, `INSERT INTO c_rows VALUES ('n1'); INSERT INTO c_rows VALUES ('n2')`, pgx.NamedArgs{})
		fmt.Fprintf(note, "[%s]", tag)
		return err
	}},
	{"a deferred unique violation", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		_, err := tx.Exec(ctx, `INSERT INTO c_deferred VALUES ($1), ($1)`, "twice")
		return err
	}},
	{"a deferred trigger's unique violation", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		_, err := tx.Exec(ctx, `INSERT INTO c_trig VALUES ($1), ($1)`, "twice")
		return err
	}},
	{"a deferred trigger", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		_, err := tx.Exec(ctx, `INSERT INTO c_watch VALUES ($1)`, "w")
		return err
	}},
	{"a phase's own lock_timeout, at commit", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '4321ms'`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO c_watch VALUES ($1)`, "own")
		return err
	}},
	{"settings the phase sees", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		var lock string
		if err := tx.QueryRow(ctx, `SELECT current_setting('lock_timeout')`).Scan(&lock); err != nil {
			return err
		}
		return insertRow(ctx, tx, note, "lock_timeout="+lock)
	}},
	{"a notice", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		if _, err := tx.Exec(ctx, `DO $$ BEGIN RAISE NOTICE 'hello'; END $$`); err != nil {
			return err
		}
		return insertRow(ctx, tx, note, "after the notice")
	}},
	{"rows left open", func(ctx context.Context, tx pgx.Tx, note *strings.Builder) error {
		if err := insertRow(ctx, tx, note, "before"); err != nil {
			return err
		}
		_, err := tx.Query(ctx, `SELECT generate_series(1, 10000)`) // never closed
		return err
	}},
}

// errClass is what the contract compares of an error: nil, its SQLSTATE,
// or that it is some other error.
func errClass(err error) string {
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &pe):
		return pe.Code
	}
	return "error"
}

func sqlStateOf(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return fmt.Sprint(err)
}

// contractOutcome is what one run of a case left and returned.
type contractOutcome struct {
	err  string // errClass of the error
	rows string // contractRows afterwards
	note string
	runs int64  // how often the body ran
	msg  string // the error's text, shown but not compared
}

// sameOutcome compares all but the error's text.
func sameOutcome(a, b contractOutcome) bool {
	a.msg, b.msg = "", ""
	return a == b
}

var execModes = []pgx.QueryExecMode{
	pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
}

var claimModes = []idem.ClaimMode{idem.ClaimLast, idem.ClaimFirst, idem.ClaimSeparate}

// contractPool is a pool in exec mode with contractSchema's tables, whose
// connections have set lock_timeout for the session and prepared c_insert,
// c_insert_fixed and c_upper by name (as an application does in
// AfterConnect), and an engine on it.
func contractPool(t *testing.T, mode pgx.QueryExecMode) (*pgxpool.Pool, *idem.Engine) {
	t.Helper()
	ctx := context.Background()
	var ready atomic.Bool // the tables exist: prepare on connect
	pool, schema := dbtest.PoolWith(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.DefaultQueryExecMode = mode
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			if !ready.Load() || dbtest.Pooled() {
				return nil
			}
			// A setting of the session's own, as an application makes
			// in AfterConnect: what the engine sets for its claim wait
			// must leave it as it found it.
			if _, err := conn.Exec(ctx, `SET lock_timeout = '9876ms'`); err != nil {
				return err
			}
			for name, sql := range map[string]string{
				"c_insert":       `INSERT INTO c_rows VALUES ($1)`,
				"c_insert_fixed": `INSERT INTO c_rows VALUES ('fixed')`,
				"c_upper":        `SELECT upper($1::text)`,
			} {
				if _, err := conn.Prepare(ctx, name, sql); err != nil {
					return err
				}
			}
			return nil
		}
	})
	if _, err := pool.Exec(ctx, contractSchema); err != nil {
		t.Fatal(err)
	}
	dbtest.Migrate(t, pool, schema)
	ready.Store(true)
	pool.Reset() // every connection from now on prepares
	eng, err := idem.New(pool, idem.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return pool, eng
}

// poolerModes are the exec modes to test: all of them, or, through a pooler
// in transaction mode (PgBouncer), which gives each transaction any server
// connection, those that keep no statement on one across round trips
// (docs/operations.md): not cache_statement, whose statements are prepared
// by name, nor describe_exec, which describes in one round trip and
// executes in the next. The same holds without idemgen, so the cases that
// use an application's statements prepared by name are left out there too.
func poolerModes() []pgx.QueryExecMode {
	if !dbtest.Pooled() {
		return execModes
	}
	return slices.DeleteFunc(slices.Clone(execModes), func(m pgx.QueryExecMode) bool {
		return m == pgx.QueryExecModeCacheStatement || m == pgx.QueryExecModeDescribeExec
	})
}

// byName marks the cases that run statements an application prepared on
// the connection.
func byName(c txCase) bool { return strings.Contains(c.name, "prepared by name") }

func TestPhaseTxContract(t *testing.T) {
	t.Parallel()
	cases := txCases
	if dbtest.Pooled() {
		cases = slices.DeleteFunc(slices.Clone(cases), byName)
	}
	for _, mode := range poolerModes() {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pool, eng := contractPool(t, mode)
			ctx := context.Background()
			outcome := func(t *testing.T, run func(body func(context.Context, pgx.Tx) error) error, c txCase) contractOutcome {
				t.Helper()
				if _, err := pool.Exec(ctx, contractReset); err != nil {
					t.Fatal(err)
				}
				var note strings.Builder
				var runs atomic.Int64
				err := run(func(ctx context.Context, tx pgx.Tx) error {
					runs.Add(1)
					note.Reset()
					return c.body(ctx, tx, &note)
				})
				var rows string
				if err := pool.QueryRow(ctx, contractRows).Scan(&rows); err != nil {
					t.Fatal(err)
				}
				return contractOutcome{err: errClass(err), rows: rows, note: note.String(), runs: runs.Load(), msg: fmt.Sprint(err)}
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					want := outcome(t, func(body func(context.Context, pgx.Tx) error) error {
						return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return body(ctx, tx) })
					}, c)
					for _, cm := range claimModes {
						op := &idem.Operation{ID: "contract-" + string(cm), Policy: idem.Policy{Lease: 30 * time.Second, Claim: cm}}
						key := fmt.Sprintf("%s/%s", mode, c.name)
						got := outcome(t, func(body func(context.Context, pgx.Tx) error) error {
							_, err := idem.Run(ctx, eng, op, request("", key, "b"), []idem.Phase[struct{}]{{
								Name: "body",
								Final: func(ctx context.Context, tx pgx.Tx, _ *struct{}) (*idem.Response, error) {
									if err := body(ctx, tx); err != nil {
										return nil, err
									}
									return &idem.Response{Status: 200}, nil
								},
							}})
							return err
						}, c)
						if !sameOutcome(got, want) {
							t.Errorf("claim %s:\n got  %+v\n want %+v (pgx.BeginFunc)", cm, got, want)
						}
					}
				})
			}
		})
	}
}

// TestEveryExecMode: the protocol's paths that the contract's one final
// phase does not take (a recovery point with its state, a foreign phase, a
// crash and a takeover that resumes, a replay from the store) work in every
// query exec mode.
func TestEveryExecMode(t *testing.T) {
	t.Parallel()
	for _, mode := range poolerModes() {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, schema := poolWithRows(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.DefaultQueryExecMode = mode })
			eng, err := idem.New(pool, idem.Options{Schema: schema, ReplayCacheBytes: -1})
			if err != nil {
				t.Fatal(err)
			}
			for _, cm := range []idem.ClaimMode{idem.ClaimFirst, idem.ClaimSeparate} {
				op := &idem.Operation{ID: "modes-" + string(cm), Policy: idem.Policy{Lease: 30 * time.Second, Claim: cm}}
				cd, runs := &card{charges: map[string]string{}}, 0
				done := make(chan struct{})
				go func() { // dies after the charge: a recovery point, and state to resume from
					defer close(done)
					idem.Run(ctx, eng, op, request("t", "k", "b"), threePhases("k-"+string(cm), cd, &runs, "after-charge"))
				}()
				<-done
				if _, err := pool.Exec(ctx, `UPDATE records SET lease_until = now() - interval '1 second' WHERE owner_token IS NOT NULL`); err != nil {
					t.Fatal(err)
				}
				out, err := idem.Run(ctx, eng, op, request("t", "k", "b"), threePhases("k-"+string(cm), cd, &runs, ""))
				if err != nil || !out.Resumed || runs != 1 || len(cd.charges) != 1 {
					t.Fatalf("%s: resume %+v, %v (record ran %d times, %d charges)", cm, out, err, runs, len(cd.charges))
				}
				again, err := idem.Run(ctx, eng, op, request("t", "k", "b"), threePhases("k-"+string(cm), cd, &runs, ""))
				if err != nil || !again.Replayed || !sameResponse(again.Response, out.Response) {
					t.Fatalf("%s: replay %+v, %v", cm, again, err)
				}
			}
		})
	}
}
