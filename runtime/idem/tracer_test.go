package idem_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idem"
)

// sqlLog is a pgx tracer that records what it is told: each query, each
// batch's statements, and their arguments and command tags.
type sqlLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *sqlLog) add(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
}

func (l *sqlLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.add("query " + firstWord(d.SQL) + " " + argsOf(d.Args))
	return ctx
}
func (l *sqlLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (l *sqlLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	l.add("batch of " + strings.Repeat("*", d.Batch.Len()))
	return ctx
}
func (l *sqlLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s := "  " + firstWord(d.SQL) + " " + d.CommandTag.String()
	if d.Err != nil {
		s += " error"
	}
	l.add(s + " " + argsOf(d.Args))
}
func (l *sqlLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func firstWord(sql string) string { return strings.Fields(sql)[0] }

func argsOf(args []any) string {
	var b strings.Builder
	for _, a := range args {
		switch v := a.(type) {
		case string:
			b.WriteString(v + ",")
		case []byte:
			b.WriteString("bytes,")
		default:
			b.WriteString("v,")
		}
	}
	return b.String()
}

func (l *sqlLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// tracedPool is a pool like base whose tracer is log, in the given query
// mode.
func tracedPool(t *testing.T, base *pgxpool.Pool, log *sqlLog, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	return poolLike(t, base, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Tracer = log
		cfg.ConnConfig.DefaultQueryExecMode = mode
	})
}

// poolLike is a pool like base, its configuration changed by configure,
// closed when the test ends.
func poolLike(t *testing.T, base *pgxpool.Pool, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg := base.Config()
	configure(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestTracerSeesTheEngine: the statements the engine sends (the
// record-last read; the phase's statement with BEGIN; the record's insert,
// the end of the claim wait and COMMIT) reach the pool's tracer, with
// their arguments, since they all go through pgx; a replay from the store
// is that read alone; and a pool in the mode for poolers (cache_describe)
// sends the same and writes the same record.
func TestTracerSeesTheEngine(t *testing.T) {
	dbtest.NotPlaced(t, "it pins the statements as the id layout sends them")
	dbtest.NotOnCitus(t, "it pins the statements a single PostgreSQL is sent; TestStatementsGolden pins Citus's, and the claim wait's SET LOCAL travels with them")
	t.Parallel()
	e := newEnv(t)
	records := map[pgx.QueryExecMode]string{}
	modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe}
	if dbtest.Pooled() {
		// Through a pooler in transaction mode, named statements are refused
		// (docs/operations.md): the pooler's mode only.
		modes = modes[1:]
	}
	for i, mode := range modes {
		log := &sqlLog{}
		eng, err := idem.New(tracedPool(t, e.pool, log, mode), idem.Options{Schema: e.schema, ReplayCacheBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.Ready(context.Background()); err != nil { // its one-time query is no request's
			t.Fatal(err)
		}
		log.lines = nil
		key := fmt.Sprintf("k-%d", i)
		out, err := idem.Run(context.Background(), eng, lastOp, request("t", key, "b"), twoPhases(key))
		if err != nil || out.Replayed {
			t.Fatalf("%v: %+v, %v", mode, out, err)
		}
		// The phase's statement with BEGIN; the record's insert with
		// COMMIT: nothing before the phases.
		want := "batch of **\n  begin BEGIN \n  INSERT INSERT 0 1 " + key + ",\n" +
			"batch of **\n  INSERT INSERT 0 1 v,bytes,v,bytes,bytes,v,v,2000,\n  COMMIT COMMIT "
		if got := log.String(); got != want {
			t.Errorf("%v: the tracer saw\n%s\nwant\n%s", mode, got, want)
		}
		log.lines = nil
		// A replay from the store, through the same read.
		again, err := idem.Run(context.Background(), eng, lastOp, request("t", key, "b"), twoPhases(key))
		if err != nil || !again.Replayed || string(again.Response.Body) != string(out.Response.Body) ||
			again.Response.Header.Get("Location") != "/p/1" || again.Response.Status != 201 {
			t.Fatalf("%v: replay %+v, %v; want the stored 201", mode, again, err)
		}
		// A replay from the store, of an engine whose claims did not find
		// keys held often: the phase runs, the record's insert finds the
		// key held, the rollback, and the read that replays.
		if got, want := log.String(), "batch of **\n  begin BEGIN \n  INSERT INSERT 0 1 "+key+",\n"+
			"batch of **\n  INSERT  error v,bytes,v,bytes,bytes,v,v,2000,\nquery ROLLBACK \nquery SELECT v,"; got != want {
			t.Errorf("%v: the replay's trace is\n%s\nwant\n%s", mode, got, want)
		}
		var row string
		if err := e.pool.QueryRow(context.Background(), `SELECT row(operation, fingerprint, owner_token, lease_until,
    recovery_point, phase_state::text, request, background, response_status, response_headers::text, response_body,
    body_omitted, attempts, expires_at - created_at > interval '1 hour', key_derivation)::text
FROM records WHERE id = record_id('last', 't', $1)`, key).Scan(&row); err != nil {
			t.Fatal(err)
		}
		records[mode] = row
	}
	if len(records) < 2 {
		return
	}
	a, b := records[pgx.QueryExecModeCacheStatement], records[pgx.QueryExecModeCacheDescribe]
	if a = strings.Replace(a, hexOf("k-0"), "KEY", 1); a != strings.Replace(b, hexOf("k-1"), "KEY", 1) {
		t.Errorf("the two paths stored different records:\n%s\n%s", a, b)
	}
}

func hexOf(s string) string { return fmt.Sprintf("%x", s) }

// TestFirstStatements: a ClaimLast phase's first statement, which travels
// with BEGIN in one pgx batch, behaves as pgx's own Query, Exec and
// QueryRow: rows iterate and scan, command tags are pgx's, and a table
// changed under the statement pgx prepared fails once (as pgx's statement
// cache does) and then works again. One connection, so that every
// execution meets what the others prepared.
func TestFirstStatements(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.pool.Config()
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	eng, err := idem.New(pool, idem.Options{Schema: e.schema, ReplayCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	e.exec(`CREATE TABLE things (id int PRIMARY KEY, n int NOT NULL, note text NOT NULL)`)
	e.exec(`INSERT INTO things VALUES (1, 7, 'seven')`)
	run := func(key string, final func(context.Context, pgx.Tx) (string, error)) (string, error) {
		t.Helper()
		out, err := idem.Run(context.Background(), eng, lastOp, request("t", key, "b"), []idem.Phase[payState]{{Name: "only",
			Final: func(ctx context.Context, tx pgx.Tx, _ *payState) (*idem.Response, error) {
				body, err := final(ctx, tx)
				if err != nil {
					return nil, err
				}
				return &idem.Response{Status: 200, Body: []byte(body)}, nil
			}}})
		if err != nil {
			return "", err
		}
		return string(out.Response.Body), nil
	}
	row := func(ctx context.Context, tx pgx.Tx) (string, error) {
		var n int64
		var note string
		err := tx.QueryRow(ctx, `SELECT n, note FROM things WHERE id = $1`, 1).Scan(&n, &note)
		return fmt.Sprintf("%d %s", n, note), err
	}
	if got, err := run("row", row); err != nil || got != "7 seven" {
		t.Fatalf("QueryRow: %q, %v", got, err)
	}
	got, err := run("rows", func(ctx context.Context, tx pgx.Tx) (string, error) {
		rows, err := tx.Query(ctx, `SELECT i FROM generate_series(1, $1::int) AS i`, 3)
		if err != nil {
			return "", err
		}
		sum := 0
		for rows.Next() {
			var i int
			if err := rows.Scan(&i); err != nil {
				return "", err
			}
			sum += i
		}
		return fmt.Sprintf("%d %s", sum, rows.CommandTag()), rows.Err()
	})
	if err != nil || got != "6 SELECT 3" {
		t.Fatalf("Query: %q, %v", got, err)
	}
	got, err = run("exec", func(ctx context.Context, tx pgx.Tx) (string, error) {
		tag, err := tx.Exec(ctx, `UPDATE things SET note = note WHERE id = $1`, 1)
		return tag.String(), err
	})
	if err != nil || got != "UPDATE 1" {
		t.Fatalf("Exec: %q, %v", got, err)
	}

	e.exec(`ALTER TABLE things ALTER COLUMN n TYPE bigint`)
	if _, err := run("altered", row); err == nil {
		t.Log("the statement prepared before ALTER TABLE did not fail") // PostgreSQL may replan silently
	}
	if got, err := run("altered-again", row); err != nil || got != "7 seven" {
		t.Fatalf("QueryRow after ALTER TABLE: %q, %v; want it prepared afresh", got, err)
	}
}
