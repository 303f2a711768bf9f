package idem

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A ClaimLast execution's BEGIN travels with its phases' first statement
// (see phaseTx). Sent as a pgx batch, that round trip cost about 20
// allocations in pgx's pipeline bookkeeping, more than the statement
// itself. Where the engine prepares its own statements (queries.named),
// it sends the two through pgconn instead: the statement prepared on the
// connection by the engine, its arguments encoded by pgx's
// ExtendedQueryBuilder as pgx would, and its rows read by pgx's own Rows
// (pgx.RowsFromResultReader), so that Scan behaves exactly as in pgx.

// firstStatements are the phases' first statements the engine prepared on
// one connection, kept in the connection's CustomData under firstKey.
type firstStatements struct {
	sds   map[string]*pgconn.StatementDescription
	stale []string // statements to deallocate before the next prepare
	n     int      // statements prepared so far, for their names
}

const (
	firstKey = "idemgen.first"
	// maxFirstStatements bounds the statements prepared per connection: a
	// phase that builds its SQL (an IN list of any length, say) would
	// otherwise prepare one per shape. Past the bound, a new statement
	// goes through pgx's batch, whose statement cache is bounded.
	maxFirstStatements = 64
)

// firstStatement returns the statement description of sql, prepared on
// conn by the engine, or nil when conn already holds maxFirstStatements
// others. conn is idle (its transaction not yet begun).
func (q *queries) firstStatement(ctx context.Context, conn *pgx.Conn, sql string) (*pgconn.StatementDescription, error) {
	pc := conn.PgConn()
	fs, _ := pc.CustomData()[firstKey].(*firstStatements)
	if fs == nil {
		fs = &firstStatements{sds: map[string]*pgconn.StatementDescription{}}
		pc.CustomData()[firstKey] = fs
	}
	if sd := fs.sds[sql]; sd != nil {
		return sd, nil
	}
	if len(fs.sds) >= maxFirstStatements {
		return nil, nil
	}
	for len(fs.stale) > 0 {
		if err := pc.Deallocate(ctx, fs.stale[0]); err != nil {
			return nil, err
		}
		fs.stale = fs.stale[1:]
	}
	fs.n++
	name := "idemgen_first_" + strconv.Itoa(fs.n)
	if q.prepareTracer != nil {
		ctx = q.prepareTracer.TracePrepareStart(ctx, conn, pgx.TracePrepareStartData{Name: name, SQL: sql})
	}
	sd, err := pc.Prepare(ctx, name, sql, nil)
	if q.prepareTracer != nil {
		q.prepareTracer.TracePrepareEnd(ctx, conn, pgx.TracePrepareEndData{Err: err})
	}
	if err != nil {
		// Parse may have created it before Describe failed.
		fs.stale = append(fs.stale, name)
		return nil, err
	}
	fs.sds[sql] = sd
	return sd, nil
}

// forgetFirst drops sql's prepared statement after an error that says the
// statement no longer fits the tables (a column changed type: "cached plan
// must not change result type") or is gone; it is prepared afresh on next
// use, as pgx's statement cache does.
func forgetFirst(conn *pgx.Conn, sql string, err error) {
	switch sqlState(err) {
	case "0A000", "26000": // feature_not_supported, invalid_sql_statement_name
	default:
		return
	}
	fs, _ := conn.PgConn().CustomData()[firstKey].(*firstStatements)
	if sd := fs.sds[sql]; sd != nil {
		delete(fs.sds, sql)
		fs.stale = append(fs.stale, sd.Name)
	}
}

// firstBatch is the round trip of BEGIN and a phase's first statement in
// flight: what its rows must finish when they close.
type firstBatch struct {
	eqb  pgx.ExtendedQueryBuilder // its ResultFormats are read with the rows
	mrr  *pgconn.MultiResultReader
	tr   *batchTrace
	conn *pgx.Conn
	sql  string
}

var firstBatches = sync.Pool{New: func() any { return new(firstBatch) }}

// sendFirst sends BEGIN and sql, prepared as sd, in one round trip, and
// returns sql's rows, which end the round trip when they close. begun
// reports whether BEGIN ran: when it did not (nothing was sent, or the
// batch failed before it), the transaction is still to begin.
func (q *queries) sendFirst(ctx context.Context, conn *pgx.Conn, sd *pgconn.StatementDescription, sql string,
	args []any) (rows *batchRows, begun bool, err error) {
	if len(sd.ParamOIDs) != len(args) {
		return nil, false, fmt.Errorf("expected %d arguments, got %d", len(sd.ParamOIDs), len(args))
	}
	beginSD, err := conn.Prepare(ctx, beginSQL, beginSQL)
	if err != nil {
		return nil, false, err
	}
	fb := firstBatches.Get().(*firstBatch)
	if err := fb.eqb.Build(conn.TypeMap(), sd, args); err != nil {
		firstBatches.Put(fb)
		return nil, false, err
	}
	b := &pgconn.Batch{}
	b.ExecStatement(beginSD, nil, nil, nil)
	b.ExecStatement(sd, fb.eqb.ParamValues, fb.eqb.ParamFormats, fb.eqb.ResultFormats)
	fb.conn, fb.sql, fb.tr = conn, sql, nil
	if q.batchTracer != nil {
		fb.tr = q.traceBatch(ctx, conn, []string{beginSQL, sql}, [][]any{nil, args})
		ctx = fb.tr.ctx
	}
	fb.mrr = conn.PgConn().ExecBatch(ctx, b)
	fb.tr.reading()
	if !fb.mrr.NextResult() { // the batch failed as a whole
		return nil, false, fb.finish(nil)
	}
	tag, err := fb.mrr.ResultReader().Close()
	fb.tr.query(tag, err)
	if err != nil {
		return nil, false, fb.finish(err)
	}
	fb.tr.reading()
	if !fb.mrr.NextResult() {
		return nil, true, fb.finish(nil)
	}
	return &batchRows{Rows: pgx.RowsFromResultReader(conn.TypeMap(), fb.mrr.ResultReader()), end: fb, conn: conn}, true, nil
}

// end finishes the round trip after sql's rows closed with tag and err.
func (fb *firstBatch) end(tag pgconn.CommandTag, err error) error {
	fb.tr.query(tag, err)
	return fb.finish(err)
}

// finish reads the round trip to its end, reports it, and returns its first
// error, err if not nil.
func (fb *firstBatch) finish(err error) error {
	if merr := fb.mrr.Close(); err == nil {
		err = merr
	}
	fb.tr.end(err)
	forgetFirst(fb.conn, fb.sql, err)
	*fb = firstBatch{eqb: fb.eqb}
	firstBatches.Put(fb)
	return err
}
