package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// errEngineOwnsTx is what a phase gets if it tries to end the transaction
// it was given: the engine commits it together with the recovery point.
var errEngineOwnsTx = errors.New("idem: the engine commits or rolls back a phase's transaction; a phase must not")

// phaseTx is the pgx.Tx a local phase runs in. The engine opens and ends the
// transaction itself, so that COMMIT travels with the engine's statement of
// the recovery point or the record, and BEGIN with the claim (first mode) or
// the phase's first statement (last mode); a pgx.Tx from pgx.Conn.Begin
// could not be ended without its own round trip.
// Nested Begin calls are savepoints, as with pgx.
//
// While pending is set, the transaction's BEGIN has not been sent: the
// phase's first statement carries it, in one batch (a ClaimLast execution
// reads its key before it has anything to begin). Every way to reach the
// connection sends it first, so no statement of a phase runs outside the
// transaction.
type phaseTx struct {
	conn    *pgx.Conn
	q       *queries // the engine's, for sendFirst
	pending bool
	sp      int
	lo      pgx.Tx // a pgx transaction object for LargeObjects, made on demand
}

// begin sends the pending BEGIN on its own.
func (t *phaseTx) begin(ctx context.Context) error {
	if !t.pending {
		return nil
	}
	_, err := t.conn.Exec(ctx, beginSQL)
	t.pending = err != nil // it did not run (see sendWithBegin)
	return err
}

// withBegin reports whether a statement with these arguments can carry the
// pending BEGIN in one round trip. Query options that pgx honours only
// outside batches (an exec mode, result formats) get BEGIN on its own first.
func (t *phaseTx) withBegin(ctx context.Context, args []any) (bool, error) {
	if !t.pending {
		return false, nil
	}
	if len(args) > 0 {
		switch args[0].(type) {
		case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
			return false, t.begin(ctx)
		}
	}
	return true, nil
}

// sendWithBegin sends the pending BEGIN and sql in one round trip and
// returns sql's rows, whose closing ends the round trip. BEGIN stays
// pending unless it ran: a statement that fails before BEGIN reaches the
// server (it does not prepare) must not leave the phase's next statements
// outside the transaction.
func (t *phaseTx) sendWithBegin(ctx context.Context, sql string, args []any) (*batchRows, error) {
	if t.q != nil && t.q.named && !rewrites(args) {
		sd, err := t.q.firstStatement(ctx, t.conn, sql)
		if err != nil {
			return nil, err
		}
		if sd != nil {
			rows, begun, err := t.q.sendFirst(ctx, t.conn, sd, sql, args)
			t.pending = !begun
			return rows, err
		}
	}
	b := &pgx.Batch{}
	b.Queue(beginSQL)
	b.Queue(sql, args...)
	br := t.conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	t.pending = false
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, end: pgxBatch{br}, conn: t.conn}, nil
}

// rewrites reports whether args start with a pgx.QueryRewriter (as
// pgx.NamedArgs), which pgx's batch applies.
func rewrites(args []any) bool {
	if len(args) == 0 {
		return false
	}
	_, ok := args[0].(pgx.QueryRewriter)
	return ok
}

func (t *phaseTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	t.sp++
	name := fmt.Sprintf("idemgen_sp_%d", t.sp)
	if _, err := t.conn.Exec(ctx, savepointSQL(name)); err != nil {
		return nil, err
	}
	return &savepointTx{phaseTx: t, name: name}, nil
}

func (t *phaseTx) Commit(context.Context) error   { return errEngineOwnsTx }
func (t *phaseTx) Rollback(context.Context) error { return errEngineOwnsTx }

func (t *phaseTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.begin(ctx); err != nil {
		return 0, err
	}
	return t.conn.CopyFrom(ctx, table, cols, src)
}

func (t *phaseTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if !t.pending {
		return t.conn.SendBatch(ctx, b)
	}
	// The phase's queued queries (and their callbacks), after BEGIN.
	withBegin := &pgx.Batch{QueuedQueries: append([]*pgx.QueuedQuery{{SQL: beginSQL}}, b.QueuedQueries...)}
	br := t.conn.SendBatch(ctx, withBegin)
	// BEGIN's result; a failure is also every later result's, and leaves
	// BEGIN pending (see sendWithBegin).
	_, err := br.Exec()
	t.pending = err != nil
	return br
}

// LargeObjects needs a transaction object of pgx's own. Beginning one inside
// the open transaction only earns a warning from PostgreSQL ("there is
// already a transaction in progress"), and the engine never ends it.
func (t *phaseTx) LargeObjects() pgx.LargeObjects {
	if t.lo == nil && t.begin(context.Background()) == nil {
		t.lo, _ = t.conn.Begin(context.Background())
	}
	if t.lo == nil {
		return pgx.LargeObjects{}
	}
	return t.lo.LargeObjects()
}

func (t *phaseTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.conn.Prepare(ctx, name, sql)
}

func (t *phaseTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if batch, err := t.withBegin(ctx, args); err != nil || !batch {
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		return t.conn.Exec(ctx, sql, args...)
	}
	rows, err := t.sendWithBegin(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	rows.Close()
	return rows.CommandTag(), rows.Err()
}

func (t *phaseTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if batch, err := t.withBegin(ctx, args); err != nil || !batch {
		if err != nil {
			return nil, err
		}
		return t.conn.Query(ctx, sql, args...)
	}
	rows, err := t.sendWithBegin(ctx, sql, args)
	if err != nil {
		// Rows all the same, as pgx's Query returns, closed with the error
		// (pgx.CollectRows(tx.Query(...)) relies on them).
		return errRows{err: err, conn: t.conn}, err
	}
	return rows, nil
}

func (t *phaseTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !t.pending {
		return t.conn.QueryRow(ctx, sql, args...)
	}
	if batch, err := t.withBegin(ctx, args); err != nil || !batch {
		if err != nil {
			return errRow{err}
		}
		return t.conn.QueryRow(ctx, sql, args...)
	}
	rows, err := t.sendWithBegin(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return (*firstRow)(rows)
}

// Conn returns the transaction's connection, with the transaction begun:
// what a phase sends on it runs inside. Should BEGIN fail, the connection is
// closed rather than left to run the phase's statements outside.
func (t *phaseTx) Conn() *pgx.Conn {
	if err := t.begin(context.Background()); err != nil {
		t.conn.Close(context.Background())
	}
	return t.conn
}

// batchRows are the rows of a statement sent with BEGIN: closing them ends
// the round trip.
type batchRows struct {
	pgx.Rows
	end  rowsEnd
	conn *pgx.Conn
	err  error
}

// rowsEnd ends a round trip after its last statement's rows closed with
// tag and err, and returns the round trip's first error.
type rowsEnd interface {
	end(tag pgconn.CommandTag, err error) error
}

// pgxBatch ends a pgx batch.
type pgxBatch struct{ br pgx.BatchResults }

func (b pgxBatch) end(pgconn.CommandTag, error) error { return b.br.Close() }

func (r *batchRows) Close() {
	r.Rows.Close()
	if r.end != nil {
		r.err = r.end.end(r.Rows.CommandTag(), r.Rows.Err())
		r.end = nil
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Conn() *pgx.Conn { return r.conn }

// Scan and Values close the rows on an error, as pgx's do; here that must
// also end the round trip, or the connection stays busy.
func (r *batchRows) Scan(dest ...any) error {
	err := r.Rows.Scan(dest...)
	if err != nil {
		r.Close()
	}
	return err
}

func (r *batchRows) Values() ([]any, error) {
	v, err := r.Rows.Values()
	if err != nil {
		r.Close()
	}
	return v, err
}

// errRows are the rows of a query that could not be sent: closed, with its
// error.
type errRows struct {
	err  error
	conn *pgx.Conn
}

func (r errRows) Close()                                       {}
func (r errRows) Err() error                                   { return r.err }
func (r errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r errRows) Next() bool                                   { return false }
func (r errRows) Scan(...any) error                            { return r.err }
func (r errRows) Values() ([]any, error)                       { return nil, r.err }
func (r errRows) RawValues() [][]byte                          { return nil }
func (r errRows) Conn() *pgx.Conn                              { return r.conn }
func (r errRows) TypeMap() *pgtype.Map                         { return r.conn.TypeMap() }

// firstRow is pgx.Row over the rows of a statement sent with BEGIN, as
// pgx's own QueryRow is: the first row, or pgx.ErrNoRows.
type firstRow batchRows

func (r *firstRow) Scan(dest ...any) error {
	rows := (*batchRows)(r)
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// savepointTx is a nested transaction of a phase: a savepoint.
type savepointTx struct {
	*phaseTx
	name string
	done bool
}

func (s *savepointTx) Commit(ctx context.Context) error {
	if s.done {
		return pgx.ErrTxClosed
	}
	s.done = true
	_, err := s.conn.Exec(ctx, releaseSavepointSQL(s.name))
	return err
}

func (s *savepointTx) Rollback(ctx context.Context) error {
	if s.done {
		return pgx.ErrTxClosed
	}
	s.done = true
	_, err := s.conn.Exec(ctx, rollbackToSQL(s.name))
	return err
}

// session is an execution's connection while a transaction of it is open.
type session struct {
	pc  *pgxpool.Conn
	tx  *phaseTx
	ptx phaseTx // tx points here: one allocation for both
}

func newSession(pc *pgxpool.Conn) *session {
	s := &session{pc: pc}
	s.ptx.conn = pc.Conn()
	s.tx = &s.ptx
	return s
}

// begin acquires a connection and opens a transaction on it.
func (e *Engine) begin(ctx context.Context) (*session, error) {
	pc, err := e.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := pc.Exec(ctx, beginSQL); err != nil {
		pc.Release()
		return nil, err
	}
	return newSession(pc), nil
}

// end rolls back whatever is still open and gives the connection back. It
// is safe after a commit (nothing is open then) and on a nil session.
func (s *session) end() {
	if s == nil || s.pc == nil {
		return
	}
	if s.pc.Conn().PgConn().TxStatus() != 'I' {
		ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
		_, err := s.pc.Exec(ctx, rollbackSQL)
		cancel()
		if err != nil {
			s.pc.Conn().Close(context.Background()) // the pool drops a closed connection
		}
	}
	s.pc.Release()
	s.pc = nil
}
