package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// errEngineOwnsTx is what a phase gets if it tries to end the transaction
// it was given: the engine commits it together with the recovery point.
var errEngineOwnsTx = errors.New("idem: the engine commits or rolls back a phase's transaction; a phase must not")

// phaseTx is the pgx.Tx a local phase runs in. The engine opens and ends the
// transaction itself, so that COMMIT travels with the engine's statement of
// the recovery point or the record (and, in first and last mode, BEGIN with
// the claim or the read of the key); a pgx.Tx from pgx.Conn.Begin could not
// be ended without a round trip of its own. Nested Begin calls are
// savepoints, as with pgx.
type phaseTx struct {
	conn *pgx.Conn
	sp   int
	lo   pgx.Tx // a pgx transaction object for LargeObjects, made on demand
}

func (t *phaseTx) Begin(ctx context.Context) (pgx.Tx, error) {
	t.sp++
	name := fmt.Sprintf("idemgen_sp_%d", t.sp)
	if _, err := t.conn.Exec(ctx, "SAVEPOINT "+name); err != nil {
		return nil, err
	}
	return &savepointTx{phaseTx: t, name: name}, nil
}

func (t *phaseTx) Commit(context.Context) error   { return errEngineOwnsTx }
func (t *phaseTx) Rollback(context.Context) error { return errEngineOwnsTx }

func (t *phaseTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	return t.conn.CopyFrom(ctx, table, cols, src)
}

func (t *phaseTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.conn.SendBatch(ctx, b)
}

// LargeObjects needs a transaction object of pgx's own. Beginning one inside
// the open transaction only earns a warning from PostgreSQL ("there is
// already a transaction in progress"), and the engine never ends it.
func (t *phaseTx) LargeObjects() pgx.LargeObjects {
	if t.lo == nil {
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
	return t.conn.Exec(ctx, sql, args...)
}

func (t *phaseTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.conn.Query(ctx, sql, args...)
}

func (t *phaseTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.conn.QueryRow(ctx, sql, args...)
}

// Conn returns the transaction's connection: what a phase sends on it runs
// inside the transaction.
func (t *phaseTx) Conn() *pgx.Conn { return t.conn }

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
	_, err := s.conn.Exec(ctx, "RELEASE SAVEPOINT "+s.name)
	return err
}

func (s *savepointTx) Rollback(ctx context.Context) error {
	if s.done {
		return pgx.ErrTxClosed
	}
	s.done = true
	_, err := s.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT "+s.name)
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
	if _, err := pc.Exec(ctx, "BEGIN"); err != nil {
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
		_, err := s.pc.Exec(ctx, "ROLLBACK")
		cancel()
		if err != nil {
			s.pc.Conn().Close(context.Background()) // the pool drops a closed connection
		}
	}
	s.pc.Release()
	s.pc = nil
}
