package idem

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The engine's own fixed statements (the key's read in a ClaimLast claim,
// and every round trip that ends in COMMIT) go through pgconn's public
// API on connections where pgx would prepare them anyway: the pool's
// default exec mode is QueryExecModeCacheStatement, its statement cache
// is on, and no tracer watches the connection. There a statement is
// prepared once per connection (PgConn.Prepare), its parameters encoded
// by pgx (ExtendedQueryBuilder) and its row scanned by pgx (ScanRow), and
// a round trip is one pgconn.Batch (PgConn.ExecBatch) instead of pgx's
// pipeline. Everywhere else (another exec mode, a tracer) they go through
// pgx's Conn as a phase's statements do. What this buys is measured in
// docs/performance.md ("The engine's own statements on pgconn"); a phase's
// statements never take this path.
//
// A prepared statement that went stale (a column it returns changed type:
// "cached plan must not change result type"; or it is gone: DEALLOCATE ALL,
// a pooler that lost it) is forgotten when it fails, deallocated and
// prepared again at its next use, as pgx's statement cache does.

// fastKey is the engine's entry in a connection's PgConn.CustomData.
const fastKey = "github.com/idemgen/idemgen/runtime/idem.fastConn"

// fastConn is what the fast path keeps on one connection.
type fastConn struct {
	stmts map[string]*pgconn.StatementDescription // by SQL
	stale []string                                // names to deallocate before the next prepare
	eqb   pgx.ExtendedQueryBuilder
}

// noFast marks a connection whose configuration keeps the engine on pgx's
// Conn.
var noFast = &fastConn{}

// fastNames numbers the statements the fast path prepares, process-wide:
// a name is never reused, so a stale statement never shadows its
// replacement.
var fastNames atomic.Uint64

// fastOf returns conn's fast path, or nil where the engine's statements go
// through pgx. The decision is taken once per connection.
func fastOf(conn *pgx.Conn) *fastConn {
	data := conn.PgConn().CustomData()
	if f, ok := data[fastKey].(*fastConn); ok {
		if f == noFast {
			return nil
		}
		return f
	}
	cfg := conn.Config()
	if cfg.Tracer != nil || cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement || cfg.StatementCacheCapacity <= 0 {
		data[fastKey] = noFast
		return nil
	}
	f := &fastConn{stmts: map[string]*pgconn.StatementDescription{}}
	data[fastKey] = f
	return f
}

// notSentError is a fast round trip that failed before anything of it was
// sent: a statement that did not prepare, or arguments that did not
// encode. Like pgx.ErrPreprocessingBatch, it is no unknown outcome.
type notSentError struct{ err error }

func (e *notSentError) Error() string {
	return "idem: preparing the engine's statement: " + e.err.Error()
}
func (e *notSentError) Unwrap() error { return e.err }

// describe returns sql's statement on the connection, preparing it first if
// need be.
func (f *fastConn) describe(ctx context.Context, pc *pgconn.PgConn, sql string) (*pgconn.StatementDescription, error) {
	if sd := f.stmts[sql]; sd != nil {
		return sd, nil
	}
	for len(f.stale) > 0 {
		// Deallocating a statement the server no longer has is no error.
		if err := pc.Deallocate(ctx, f.stale[0]); err != nil {
			return nil, err
		}
		f.stale = f.stale[1:]
	}
	name := "idemgen_" + strconv.FormatUint(fastNames.Add(1), 10)
	sd, err := pc.Prepare(ctx, name, sql, nil)
	if err != nil {
		return nil, err
	}
	f.stmts[sql] = sd
	return sd, nil
}

// forget drops the statements of sqls after one of them failed stale.
func (f *fastConn) forget(sqls ...string) {
	for _, sql := range sqls {
		if sd := f.stmts[sql]; sd != nil {
			f.stale = append(f.stale, sd.Name)
			delete(f.stmts, sql)
		}
	}
}

// queryRow runs sql with args and returns its row, as pgx's QueryRow.
func (f *fastConn) queryRow(ctx context.Context, conn *pgx.Conn, sql string, args []any) pgx.Row {
	pc := conn.PgConn()
	sd, err := f.describe(ctx, pc, sql)
	if err != nil {
		return errRow{err}
	}
	if err := f.eqb.Build(conn.TypeMap(), sd, args); err != nil {
		return errRow{err}
	}
	rr := pc.ExecStatement(ctx, sd, f.eqb.ParamValues, f.eqb.ParamFormats, f.eqb.ResultFormats)
	return &fastRow{f: f, conn: conn, sql: sql, rr: rr}
}

// fastRow is the row of queryRow: the first row, or pgx.ErrNoRows.
type fastRow struct {
	f    *fastConn
	conn *pgx.Conn
	sql  string
	rr   *pgconn.ResultReader
}

func (r *fastRow) Scan(dest ...any) error {
	var scanErr error
	found := r.rr.NextRow()
	if found {
		scanErr = pgx.ScanRow(r.conn.TypeMap(), r.rr.FieldDescriptions(), r.rr.Values(), dest...)
	}
	_, err := r.rr.Close()
	switch {
	case err != nil:
		if stale(err) {
			r.f.forget(r.sql)
		}
		return err
	case scanErr != nil:
		return scanErr
	case !found:
		return pgx.ErrNoRows
	}
	return nil
}

// sendCommit sends qs in one pgconn batch and reads their results, as the
// package's sendCommit does through pgx.
func (f *fastConn) sendCommit(ctx context.Context, conn *pgx.Conn, qs []query) (int, error) {
	pc := conn.PgConn()
	var batch pgconn.Batch
	for i, q := range qs {
		sd, err := f.describe(ctx, pc, q.sql)
		if err == nil {
			err = f.eqb.Build(conn.TypeMap(), sd, q.args)
		}
		if err != nil {
			return i, &notSentError{err}
		}
		batch.ExecStatement(sd, f.eqb.ParamValues, f.eqb.ParamFormats, f.eqb.ResultFormats)
	}
	mrr := pc.ExecBatch(ctx, &batch)
	done := 0
	var err error
	for mrr.NextResult() {
		if _, err = mrr.ResultReader().Close(); err != nil {
			break
		}
		done++
	}
	if cerr := mrr.Close(); err == nil {
		err = cerr
	}
	if err != nil && stale(err) {
		for _, q := range qs {
			f.forget(q.sql)
		}
	}
	return done, err
}

// fastNotSent reports a fast round trip that sent nothing.
func fastNotSent(err error) bool {
	var ns *notSentError
	return errors.As(err, &ns)
}
