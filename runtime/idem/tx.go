package idem

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// errEngineOwnsTx is what a phase gets if it tries to end the transaction
// it was given: the engine commits it together with the recovery point.
var errEngineOwnsTx = errors.New("idem: the engine commits or rolls back a phase's transaction; a phase must not")

// phaseTx is the pgx.Tx a local phase runs in: pgx's own transaction
// (tx), begun by pgx (Conn.BeginTx, or Batch.BeginTx in the engine's claim),
// to which every method but Commit and Rollback goes as it is. The engine
// ends the transaction itself, so that COMMIT travels with the engine's
// statement of the recovery point or the record (docs/internals.md, "A
// phase's transaction").
//
// Until tx is set, the transaction is still to begin (a ClaimLast
// execution reads its key before it has anything to begin): the phase's
// first statement brings BEGIN along in one pgx batch (Batch.BeginTx),
// where a batch runs that statement as the same call outside a batch
// would. Calls a batch would run otherwise (an Exec without arguments,
// which pgx sends over the simple protocol and may hold several
// statements; a query option such as an exec mode; COPY; a savepoint;
// large objects; the connection itself) begin the transaction on their own
// first. Should a batch fail before its BEGIN ran (a statement that does
// not prepare), nothing of it ran: the transaction is begun on its own and
// the call made again in it, so that it fails, and leaves the transaction,
// exactly as in pgx.
type phaseTx struct {
	conn *pgx.Conn
	tx   pgx.Tx
}

// begin begins the pending transaction on its own.
func (t *phaseTx) begin(ctx context.Context) error {
	if t.tx != nil {
		return nil
	}
	tx, err := t.conn.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return err
	}
	t.tx = tx
	return nil
}

// batchable reports whether a query with these arguments runs the same in
// a batch as on its own: pgx takes its options (an exec mode, result
// formats, a QueryRewriter such as pgx.NamedArgs) from the front of the
// arguments in any order, and a batch honours only a QueryRewriter.
func batchable(args []any) bool {
	for _, a := range args {
		switch a.(type) {
		case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
			return false
		case pgx.QueryRewriter:
			continue
		}
		break
	}
	return true
}

// rewrites reports whether args start with pgx options, a QueryRewriter
// among them: after rewriting, an Exec may have no arguments left, which
// pgx sends over the simple protocol, as a batch would not.
func rewrites(args []any) bool {
	for _, a := range args {
		switch a.(type) {
		case pgx.QueryRewriter:
			return true
		case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
			continue
		}
		break
	}
	return false
}

// withBegin sends BEGIN and sql in one batch and returns the batch, its
// BEGIN read. ok is false when BEGIN did not run, and then nothing did:
// the batch is closed and the transaction still to begin.
func (t *phaseTx) withBegin(ctx context.Context, queue func(*pgx.Batch)) (br pgx.BatchResults, ok bool) {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	queue(b)
	br = t.conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, false
	}
	t.tx = br.Tx()
	return br, true
}

func (t *phaseTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.tx.Begin(ctx)
}

func (t *phaseTx) Commit(context.Context) error   { return errEngineOwnsTx }
func (t *phaseTx) Rollback(context.Context) error { return errEngineOwnsTx }

func (t *phaseTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.begin(ctx); err != nil {
		return 0, err
	}
	return t.tx.CopyFrom(ctx, table, cols, src)
}

func (t *phaseTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	// A batch that begins a transaction of its own goes to pgx's
	// transaction, which refuses it.
	if t.tx == nil && pgx.FailedBatchResults(b, nil).Tx() == nil {
		br, ok := t.withBegin(ctx, func(withBegin *pgx.Batch) {
			// Copies: pgx writes what it prepared into a queued query, and
			// the phase's batch may have to be sent afresh (see phaseTx).
			for _, q := range b.QueuedQueries {
				c := *q
				withBegin.QueuedQueries = append(withBegin.QueuedQueries, &c)
			}
		})
		if ok {
			return phaseBatch{br}
		}
	}
	if err := t.begin(ctx); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return t.tx.SendBatch(ctx, b)
}

// phaseBatch is the phase's batch sent with BEGIN: it began no transaction
// of the phase's own.
type phaseBatch struct{ pgx.BatchResults }

func (phaseBatch) Tx() pgx.Tx { return nil }

func (t *phaseTx) LargeObjects() pgx.LargeObjects {
	if err := t.begin(context.Background()); err != nil {
		// The large objects of a closed pgx transaction: every call fails
		// with pgx.ErrTxClosed.
		b := &pgx.Batch{}
		b.BeginTx(pgx.TxOptions{})
		return pgx.FailedBatchResults(b, err).Tx().LargeObjects()
	}
	return t.tx.LargeObjects()
}

// Prepare begins the transaction first: a statement that does not prepare
// aborts pgx's transaction too.
func (t *phaseTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.tx.Prepare(ctx, name, sql)
}

func (t *phaseTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	// pgx sends an Exec without arguments (also after a QueryRewriter left
	// none) over the simple protocol, which a batch would not.
	if t.tx == nil && len(args) > 0 && batchable(args) && !rewrites(args) {
		if br, ok := t.withBegin(ctx, func(b *pgx.Batch) { b.Queue(sql, args...) }); ok {
			tag, err := br.Exec()
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			return tag, err
		}
	}
	if err := t.begin(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.tx.Exec(ctx, sql, args...)
}

func (t *phaseTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.tx == nil && batchable(args) {
		if br, ok := t.withBegin(ctx, func(b *pgx.Batch) { b.Queue(sql, args...) }); ok {
			rows, err := br.Query()
			if err != nil {
				br.Close()
				return rows, err
			}
			return &batchRows{Rows: rows, br: br}, nil
		}
	}
	if err := t.begin(ctx); err != nil {
		return errRows{err: err, conn: t.conn}, err
	}
	return t.tx.Query(ctx, sql, args...)
}

func (t *phaseTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.tx == nil && batchable(args) {
		if br, ok := t.withBegin(ctx, func(b *pgx.Batch) { b.Queue(sql, args...) }); ok {
			rows, err := br.Query()
			if err != nil {
				br.Close()
				return errRow{err}
			}
			return (*firstRow)(&batchRows{Rows: rows, br: br})
		}
	}
	if err := t.begin(ctx); err != nil {
		return errRow{err}
	}
	return t.tx.QueryRow(ctx, sql, args...)
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

// batchRows are the rows of a statement sent with BEGIN: closing them
// closes the batch, as closing pgx's rows ends their query.
type batchRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if r.br != nil {
		r.err = r.br.Close()
		r.br = nil
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

// Scan and Values close the rows on an error, as pgx's do; here that must
// also close the batch, or the connection stays busy.
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
// error, as pgx's Query returns them.
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

// session is an execution's connection while a transaction of it is open.
type session struct {
	pc *pgxpool.Conn
	tx phaseTx
	e  *Engine // set when the session took a turn (acquireHeld), given back by end
}

func newSession(pc *pgxpool.Conn) *session {
	return &session{pc: pc, tx: phaseTx{conn: pc.Conn()}}
}

// heldSession is a session on a connection the execution holds while the
// operation's code runs (acquireHeld): within its turn.
func (e *Engine) heldSession(ctx context.Context) (*session, error) {
	h, err := e.acquireHeld(ctx)
	if err != nil {
		return nil, err
	}
	return e.sessionOf(h), nil
}

// sessionOf is the session on h.
func (e *Engine) sessionOf(h held) *session {
	s := newSession(h.pc)
	if h.turn {
		s.e = e
	}
	return s
}

// begin acquires a connection the execution holds (heldSession) and
// begins a transaction on it.
func (e *Engine) begin(ctx context.Context) (*session, error) {
	s, err := e.heldSession(ctx)
	if err != nil {
		return nil, err
	}
	return s.begin(ctx)
}

// beginKeyless is begin for a request without a key, which waits for its
// turn as long as its context lets it (withHeld).
func (e *Engine) beginKeyless(ctx context.Context) (*session, error) {
	h, err := e.acquireTurn(ctx, false)
	if err != nil {
		return nil, err
	}
	return e.sessionOf(h).begin(ctx)
}

// begin begins a transaction on s, or ends s.
func (s *session) begin(ctx context.Context) (*session, error) {
	if err := s.tx.begin(ctx); err != nil {
		s.end()
		return nil, err
	}
	return s, nil
}

// end rolls back whatever is still open and gives the connection back. It
// is safe after a commit (nothing is open then) and on a nil session.
func (s *session) end() {
	if s == nil || s.pc == nil {
		return
	}
	conn := s.pc.Conn()
	if !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
		ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
		_, err := conn.Exec(ctx, rollbackSQL)
		cancel()
		if err != nil {
			conn.Close(context.Background()) // the pool drops a closed connection
		}
	}
	s.pc.Release()
	if s.e != nil {
		<-s.e.held
	}
	s.pc = nil
}
