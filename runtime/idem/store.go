package idem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// store is the engine's one way to its tables: a method per statement of
// sql/*.sql (or per round trip, where statements travel together with BEGIN
// or COMMIT), each with typed parameters, hiding how the statements travel.
// Methods that take a *pgx.Conn run on a transaction the caller holds
// there; the others run on the pool. docs/runtime.md, "What protects a
// record", names the clause of each statement that protects a record and
// the test that fails without it.
type store struct {
	pool   *pgxpool.Pool
	q      statements
	schema string
	// claimWait is Options.ClaimWait for lock_timeout, in milliseconds.
	claimWait string
}

func newStore(pool *pgxpool.Pool, schema string, claimWait time.Duration) (*store, error) {
	q, err := loadStatements(schema)
	if err != nil {
		return nil, err
	}
	// lock_timeout counts milliseconds, and reads 0 as no limit at all: a
	// wait under a millisecond is rounded up.
	ms := int64((claimWait + time.Millisecond - 1) / time.Millisecond)
	return &store{pool: pool, q: q, schema: schema, claimWait: strconv.FormatInt(ms, 10)}, nil
}

const (
	stateClaimed   = "claimed"
	stateCompleted = "completed"
)

// execer is what both a pool and a connection offer.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// uuidArg passes a record's id or an owner token as a uuid parameter.
func uuidArg(b [16]byte) pgtype.UUID { return pgtype.UUID{Bytes: b, Valid: true} }

// micros passes a duration to SQL as microseconds (bigint).
func micros(d time.Duration) int64 { return d.Microseconds() }

// claimParams is c's claim, as Claim inserts it, waiting at most wait (in
// milliseconds) for an uncommitted claim of the key.
func (c *claim) claimParams(payload []byte, wait string) *claimParams {
	return &claimParams{LockTimeout: wait, ID: uuidArg(c.id), Namespace: c.ns, Scope: c.scope, Key: c.key, OwnerToken: uuidArg(c.token),
		Operation: c.op.ID, Fingerprint: c.fingerprint, LeaseUS: micros(c.policy.Lease), Request: payload,
		Background: c.policy.Complete == idemtype.CompleteBackground, RetentionUS: micros(c.policy.Retention),
		KeyDerivation: int16(CurrentKeyDerivation)}
}

// owner is what fences c's statements: its record and its token.
func (c *claim) owner() *ownerParams {
	return &ownerParams{ID: uuidArg(c.id), OwnerToken: uuidArg(c.token)}
}

// claim inserts c's record (Claim, or ClaimAsync) and reports whether it
// did: false when the key is held. An uncommitted claim that holds the key
// past the claim wait fails it with lock_not_available.
func (s *store) claim(ctx context.Context, async bool, c *claim, payload []byte) (bool, error) {
	st := &s.q.Claim
	if async {
		st = &s.q.ClaimAsync
	}
	tag, err := s.pool.Exec(ctx, st.sql, st.args(c.claimParams(payload, s.claimWait))...)
	return tag.RowsAffected() == 1, err
}

// record is what a claim reads of the record holding its key (Read,
// ClaimRead).
type record struct {
	operation   string
	fingerprint []byte
	state       string
	owner       *[16]byte
	live        bool
	retryAfter  time.Duration
	// pastRetention: expires_at has passed. Whether the record may be
	// freed is decided by the delete's own predicates.
	pastRetention bool
	expiresIn     time.Duration // until expires_at
	recovery      string
	phaseState    []byte
	status        *int
	headers       http.Header
	body          []byte
	bodyOmitted   bool
}

func (r *record) response() *Response {
	resp := &Response{Header: r.headers, Body: r.body}
	if r.status != nil {
		resp.Status = *r.status
	}
	if resp.Header == nil {
		resp.Header = http.Header{}
	}
	if resp.Body == nil {
		resp.Body = []byte{}
	}
	return resp
}

// scanRecord decodes the row of Read and ClaimRead. It returns nil, and no
// error, for ClaimRead's row without a record (an empty state): no record holds
// the key.
func scanRecord(row pgx.Row) (*record, error) {
	// One allocation holds every destination (each escapes into Scan's
	// arguments). The nullable owner and status go into pgtype's own
	// types, which pgx scans directly, where a pointer to a pointer takes a
	// scan plan built by reflection on every read.
	var d struct {
		record
		lease, expires float64
		headers        []byte
		owner          pgtype.UUID
		status         pgtype.Int4
	}
	r := &d.record
	err := row.Scan(&r.operation, &r.fingerprint, &r.state, &d.owner, &r.live, &d.lease, &r.pastRetention, &d.expires,
		&r.recovery, &r.phaseState, &d.status, &d.headers, &r.body, &r.bodyOmitted)
	if err != nil || r.state == "" {
		return nil, err
	}
	if d.owner.Valid {
		r.owner = &d.owner.Bytes
	}
	if d.status.Valid {
		st := int(d.status.Int32)
		r.status = &st
	}
	if r.headers, err = parseHeaders(d.headers); err != nil {
		return nil, err
	}
	// Until the lease ends (the Retry-After of a 409, at least a second)
	// and until expires_at.
	r.expiresIn = time.Duration(d.expires * float64(time.Second))
	r.retryAfter = max(time.Duration(d.lease*float64(time.Second)), time.Second)
	return r, nil
}

// read reads the record with id (Read) on db, or pgx.ErrNoRows.
func (s *store) read(ctx context.Context, db execer, id [16]byte) (*record, error) {
	return scanRecord(db.QueryRow(ctx, s.q.Read.sql, s.q.Read.args(&idParams{ID: uuidArg(id)})...))
}

// takeover installs c's token on a claimed record whose lease expired, if
// the owner is still the one observed (Takeover). On success c holds the
// record's recovery point and state.
func (s *store) takeover(ctx context.Context, c *claim, observed *[16]byte) (bool, error) {
	if observed == nil {
		return false, nil
	}
	p := &takeoverParams{ID: uuidArg(c.id), OwnerToken: uuidArg(*observed), NewOwner: uuidArg(c.token),
		LeaseUS: micros(c.policy.Lease), RetentionUS: micros(c.policy.Retention)}
	err := s.pool.QueryRow(ctx, s.q.Takeover.sql, s.q.Takeover.args(p)...).Scan(&c.recovery, &c.state, &c.derivation, &c.crossedFailover)
	if err == pgx.ErrNoRows {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	c.resumed = true
	return true, nil
}

// deleteExpired frees a record past its retention if it is freeable
// (DeleteExpired), and reports whether it did.
func (s *store) deleteExpired(ctx context.Context, id [16]byte) (bool, error) {
	tag, err := s.pool.Exec(ctx, s.q.DeleteExpired.sql, s.q.DeleteExpired.args(&idParams{ID: uuidArg(id)})...)
	return tag.RowsAffected() == 1, err
}

// release deletes c's record if it is still claimed by c at c's recovery
// point (Release), and reports whether it did.
func (s *store) release(ctx context.Context, c *claim) (bool, error) {
	p := &releaseParams{ID: uuidArg(c.id), OwnerToken: uuidArg(c.token), RecoveryPoint: c.recovery}
	tag, err := s.pool.Exec(ctx, s.q.Release.sql, s.q.Release.args(p)...)
	return tag.RowsAffected() == 1, err
}

// yield gives c's lease up at once (Yield).
func (s *store) yield(ctx context.Context, c *claim) error {
	_, err := s.pool.Exec(ctx, s.q.Yield.sql, s.q.Yield.args(c.owner())...)
	return err
}

// refresh extends c's lease (Refresh), and reports whether c still owns it.
func (s *store) refresh(ctx context.Context, c *claim) (bool, error) {
	p := &refreshParams{ID: uuidArg(c.id), OwnerToken: uuidArg(c.token), LeaseUS: micros(c.policy.Lease)}
	tag, err := s.pool.Exec(ctx, s.q.Refresh.sql, s.q.Refresh.args(p)...)
	return tag.RowsAffected() == 1, err
}

// claimInTx sends a ClaimFirst claim on conn in one round trip: BEGIN,
// ClaimRead, Claim (a conflict inserts nothing). When the claim
// was inserted, tx is its transaction, open on conn. Otherwise conn's
// transaction is still open, to be rolled back, and rec is what held the
// key (nil if the holder committed while the insert waited), or err is why
// it failed: a *pgconn.PgError with code lock_not_available when a
// concurrent owner's uncommitted claim held it past the claim wait.
func (s *store) claimInTx(ctx context.Context, conn *pgx.Conn, c *claim, payload []byte) (tx pgx.Tx, rec *record, err error) {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(s.q.ClaimRead.sql, s.q.ClaimRead.args(&claimReadParams{ID: uuidArg(c.id),
		StatementTimeout: strconv.FormatInt(c.policy.Lease.Milliseconds(), 10)})...)
	b.Queue(s.q.Claim.sql, s.q.Claim.args(c.claimParams(payload, s.claimWait))...)
	br := conn.SendBatch(ctx, b)
	var tag pgconn.CommandTag
	_, err = br.Exec()
	if err == nil {
		rec, err = scanRecord(br.QueryRow())
	}
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return nil, nil, err
	case tag.RowsAffected() == 1:
		return br.Tx(), nil, nil
	}
	return nil, rec, nil
}

// commitClaim commits, on conn, a ClaimFirst claim whose first phase is
// foreign: alone, before anything outside the database happens.
func (s *store) commitClaim(ctx context.Context, conn *pgx.Conn, async bool) error {
	sql := commit
	if async {
		sql = s.q.CommitAsync.sql
	}
	_, err := conn.Exec(ctx, sql)
	return commitFailed(err)
}

// commitProgress stores c's recovery point phase with its state (Advance)
// and commits, in one round trip on conn, whose transaction it ends. A
// stale owner's statement matches no row and aborts the transaction:
// ErrFenced. Other failures are classified by commitFailed.
func (s *store) commitProgress(ctx context.Context, conn *pgx.Conn, c *claim, phase string, state []byte) error {
	if len(state) == 0 {
		state = nil
	}
	p := &advanceParams{ID: uuidArg(c.id), OwnerToken: uuidArg(c.token), RecoveryPoint: phase, PhaseState: state,
		LeaseUS: micros(c.policy.Lease), RetentionUS: micros(c.policy.Retention)}
	return s.commitFenced(ctx, conn, s.q.Advance.sql, s.q.Advance.args(p))
}

// commitResponse completes c's record with resp (Complete) and commits, in
// one round trip on conn, fenced as commitProgress is.
func (s *store) commitResponse(ctx context.Context, conn *pgx.Conn, c *claim, resp *Response, omitted bool) error {
	p := &completeParams{ID: uuidArg(c.id), OwnerToken: uuidArg(c.token), Fingerprint: receiptFingerprint(c.op.ID, c.fingerprint),
		Status: resp.Status, Headers: appendHeaders(nil, resp.Header), Body: storedBody(resp, omitted), BodyOmitted: omitted,
		RetentionUS: micros(c.policy.Retention)}
	return s.commitFenced(ctx, conn, s.q.Complete.sql, s.q.Complete.args(p))
}

func (s *store) commitFenced(ctx context.Context, conn *pgx.Conn, sql string, args []any) error {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue(commit)
	stmt, err := sendCommit(ctx, conn, b)
	switch {
	case err == nil:
		return nil
	case stmt == 0 && sqlState(err) == divisionByZero: // the fence matched no row
		return ErrFenced
	}
	return commitFailed(err)
}

// commitRecord inserts the completed record of a ClaimLast execution
// (InsertCompleted) and commits, in one round trip on conn (with BEGIN
// first when the phases sent no statement). The claim wait bounds the
// insert and nothing after it: the insert restores the lock_timeout the
// phases left before COMMIT runs their deferred checks. A failure means,
// by what failed:
//   - the insert, on the records table's own key: a concurrent duplicate
//     committed first, errLostRace; nothing of this execution remains, and
//     the duplicate's answer is the one to give;
//   - the insert, past the claim wait: a concurrent claim is still
//     uncommitted, an *Error of kind in-flight;
//   - any other refusal (the COMMIT's own: a deferred constraint or
//     trigger of the phases' tables): the error as is, nothing committed;
//   - anything that leaves the outcome unknown: a *commitUnknownError.
func (s *store) commitRecord(ctx context.Context, conn *pgx.Conn, begin bool, c *claim, resp *Response, omitted bool) error {
	b := &pgx.Batch{}
	if begin {
		b.Queue(beginSQL)
	}
	insert := b.Len()
	p := &insertCompletedParams{ID: uuidArg(c.id), Fingerprint: receiptFingerprint(c.op.ID, c.fingerprint), Status: resp.Status,
		Headers: appendHeaders(nil, resp.Header), Body: storedBody(resp, omitted), BodyOmitted: omitted,
		RetentionUS: micros(c.policy.Retention), LockTimeout: s.claimWait}
	b.Queue(s.q.InsertCompleted.sql, s.q.InsertCompleted.args(p)...)
	b.Queue(commit)
	stmt, err := sendCommit(ctx, conn, b)
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if stmt == insert && errors.As(err, &pe) {
		switch {
		case pe.Code == uniqueViolation && pe.SchemaName == s.schema && pe.TableName == "records" && pe.ConstraintName == "records_pkey":
			return errLostRace
		case pe.Code == lockNotAvailable:
			return inFlight(time.Second, err)
		}
	}
	return commitFailed(err)
}

// errLostRace: a ClaimLast execution found the key taken when it came to
// insert its record; it rolled back, and the claim is decided again.
var errLostRace = errors.New("idem: a concurrent execution of this key committed first")

// storedBody is how a response's body is stored: NULL when it was omitted.
// The headers are stored coded (appendHeaders).
func storedBody(resp *Response, omitted bool) []byte {
	switch {
	case omitted:
		return nil
	case resp.Body == nil:
		return []byte{}
	}
	return resp.Body
}

// sendCommit sends b, whose last statement is COMMIT, and reads its results
// one by one. On a failure it returns the index of the statement whose
// result failed (len(b.QueuedQueries) when the failure came after the last
// result: a FATAL before ReadyForQuery) and the error.
func sendCommit(ctx context.Context, conn *pgx.Conn, b *pgx.Batch) (int, error) {
	br := conn.SendBatch(ctx, b)
	for i := range b.QueuedQueries {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return i, err
		}
	}
	return len(b.QueuedQueries), br.Close()
}

// errStale is a commit that the server refused because a statement of the
// engine's that pgx had prepared on the connection no longer fits the
// tables or is gone (see againIfStale). Nothing of the transaction
// committed, and pgx has forgotten the statement: the execution is decided
// again, as a retry would (it resumes from the record's recovery point).
var errStale = errors.New("idem: a statement prepared on the connection was stale; the engine decides the claim again")

// stale reports an error that says a prepared statement no longer fits
// the tables ("cached plan must not change result type") or is gone
// (DEALLOCATE ALL, a pooler that lost it).
func stale(err error) bool {
	switch sqlState(err) {
	case featureNotSupported, invalidStatementName:
		return true
	}
	return false
}

// commitUnknownError is a commit whose outcome is unknown: the COMMIT was
// sent, and the connection failed (a FATAL, EOF, a timeout) before the
// server said whether it took effect. Nothing may be released or retried
// as if it had not: the next attempt, or the background completer, finds
// out from the record.
type commitUnknownError struct{ Err error }

func (e *commitUnknownError) Error() string {
	return "idem: the commit's outcome is unknown: " + e.Err.Error()
}

func (e *commitUnknownError) Unwrap() error { return e.Err }

// commitFailed classifies the failure of a round trip that ended in
// COMMIT. The server refused the transaction (nothing of it committed) when
// nothing was sent (pgx says so: pgconn.SafeToRetry, or a batch that failed
// in its preparation, pgx.ErrPreprocessingBatch) or when it answered
// with an error of severity ERROR, which aborts the transaction or is the
// COMMIT's own refusal (a deferred constraint); the error is returned as is,
// or wrapped in errStale when it is a stale prepared statement's. Anything
// else (a FATAL, a broken connection, a timeout) came after the
// COMMIT may have taken effect: a *commitUnknownError.
func commitFailed(err error) error {
	var notSent pgx.ErrPreprocessingBatch // a statement did not prepare or its arguments did not encode
	switch {
	case stale(err): // a statement of the round trip that pgx had prepared
		return fmt.Errorf("%w: %w", errStale, err)
	case err == nil || pgconn.SafeToRetry(err) || errors.As(err, &notSent):
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && severity(pe) == "ERROR" {
		return err
	}
	return &commitUnknownError{Err: err}
}

// severity is pe's severity, not localized where the server says it.
func severity(pe *pgconn.PgError) string {
	if pe.SeverityUnlocalized != "" {
		return pe.SeverityUnlocalized
	}
	return pe.Severity
}

// The transaction control the engine and its phase transactions send
// (tx.go, store_prune.go).
const (
	beginSQL    = `BEGIN`
	commit      = `COMMIT`
	rollbackSQL = `ROLLBACK`
)

// SQLSTATE codes the engine acts on.
const (
	divisionByZero   = "22012" // what the engine's statements raise to abort a batch on purpose
	uniqueViolation  = "23505"
	lockNotAvailable = "55P03" // lock_timeout ran out
	// A prepared statement that no longer fits the tables ("cached plan
	// must not change result type"), or that the server no longer has.
	featureNotSupported  = "0A000"
	invalidStatementName = "26000"
)

// sqlState returns the SQLSTATE of the *pgconn.PgError in err's chain, or
// "". Unlike errors.As it costs no allocation, on the engine's hot path.
func sqlState(err error) string {
	for err != nil {
		if pe, ok := err.(*pgconn.PgError); ok {
			return pe.Code
		}
		err = errors.Unwrap(err)
	}
	return ""
}
