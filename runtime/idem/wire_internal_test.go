package idem

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/dbtest"
)

// batchLog records what a pgx.BatchTracer is told, one line per call.
type batchLog struct{ lines []string }

func (l *batchLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	l.lines = append(l.lines, "start")
	return ctx
}

func (l *batchLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	line := strings.Fields(d.SQL)[0] + " " + d.CommandTag.String()
	if d.Err != nil {
		line += " " + sqlState(d.Err)
	}
	if d.ReadStartTime.IsZero() {
		line += " no read start"
	}
	l.lines = append(l.lines, line)
}

func (l *batchLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (l *batchLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *batchLog) TraceBatchEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	l.lines = append(l.lines, "end "+sqlState(d.Err))
}

// TestSendBatchTraces: a statement that fails before it sends a result (a
// unique violation on an insert) reaches the tracer with its error, as pgx
// reports it, and the statements the server skipped after it do not.
func TestSendBatchTraces(t *testing.T) {
	if dbtest.Pooled() {
		t.Skip("the engine sends batches through pgconn only where the pool prepares named statements, which a pooler in transaction mode refuses")
	}
	pool, schema := dbtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE u (k int PRIMARY KEY); INSERT INTO u VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	cfg := pool.Config()
	log := &batchLog{}
	cfg.ConnConfig.Tracer = log
	traced, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer traced.Close()
	e, err := New(traced, Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := traced.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Release()
	for _, k := range []int64{2, 1} {
		log.lines = nil
		p := getParams(true)
		p.int(k)
		err := e.q.sendBatch(ctx, pc.Conn(), []string{beginSQL, `INSERT INTO u VALUES ($1)`, commit}, []*params{nil, p, nil})
		want := "start|BEGIN BEGIN|INSERT INSERT 0 1|COMMIT COMMIT|end "
		if k == 1 {
			want = "start|BEGIN BEGIN|INSERT  23505|end 23505"
			if sqlState(err) != uniqueViolation {
				t.Fatalf("k=1: %v; want a unique violation", err)
			}
			if _, err := pc.Exec(ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(log.lines, "|"); got != want {
			t.Errorf("k=%d: the tracer saw %s; want %s", k, got, want)
		}
	}
}
