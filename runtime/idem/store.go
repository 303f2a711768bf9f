package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

const (
	stateClaimed   = "claimed"
	stateCompleted = "completed"
)

// stateOf is a record's state, from the columns of the table aliased as
// its argument (with its dot; "" for none): claimed while it has an owner,
// NULL where the join found no record.
func stateOf(alias string) string {
	return `CASE WHEN ` + alias + `owner_token IS NOT NULL THEN 'claimed' WHEN ` + alias + `id IS NOT NULL THEN 'completed' END`
}

// execer is what both a pool and a transaction offer.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// queries holds the engine's SQL, written once for its schema. Every
// statement that changes a claimed record is fenced by the owner token.
// docs/runtime.md lists each predicate that protects a record and the test
// that fails without it.
type queries struct {
	insertSQL, insertAsyncSQL, readSQL, takeoverSQL, deleteExpiredSQL string
	advanceSQL, completeSQL, releaseSQL, yieldSQL, refreshSQL         string
	pruneBoundsSQL, pruneSQL, pruneSkippingSQL                        string
	// Maintenance: the completer's search (completer.go), the stuck count
	// (prune.go), an operator's inspection (inspect.go) and resolution
	// (operator.go).
	abandonedBackgroundSQL, countStuckSQL string
	inspectSQL, abandonedSQL              string
	resolveDeleteSQL, resolveCompleteSQL  string
	// Statements that travel with BEGIN or COMMIT in one round trip (see
	// claimFirst and commitWith), derived from the ones above.
	claimReadSQL, advanceFencedSQL, completeFencedSQL string
	// The record-last path (ClaimLast): see commitLast.
	insertCompletedSQL string
	// claimWait is Options.ClaimWait for lock_timeout, in milliseconds.
	claimWait string
	// schema is where the records table is, for telling its own unique
	// violation from a phase's (see commitLast).
	schema string
}

// uuidArg passes a record's id or an owner token as a uuid parameter, in
// every query exec mode: pgx knows pgtype.UUID's type without asking the
// server, which QueryExecModeExec and the simple protocol do not do.
func uuidArg(b [16]byte) pgtype.UUID { return pgtype.UUID{Bytes: b, Valid: true} }

// micros passes a duration to SQL as microseconds (bigint), which PostgreSQL
// turns into an interval exactly.
func micros(d time.Duration) int64 { return d.Microseconds() }

// byKey finds a record by its id ($1), recordID of its namespace, scope
// and key (migration 005): a completed record keeps no key of its own.
const byKey = ` WHERE id = $1`

// fence matches the record only while this execution ($2) owns it: a
// completed record has no owner.
const fence = byKey + ` AND owner_token = $2`

// toReceipt completes a claimed record: everything only its execution
// needed is cleared (migration 005). The statement also sets the
// fingerprint to receiptFingerprint's, which takes in the operation.
const toReceipt = `owner_token = NULL, lease_until = NULL, created_at = NULL, attempts = NULL, key_derivation = NULL,
    operation = NULL, namespace = NULL, scope = NULL, key = NULL, recovery_point = NULL, phase_state = NULL,
    request = NULL, background = NULL`

// freeable is what makes a record past its retention deletable: completed,
// or claimed by nobody live with no committed phase. A record with a
// recovery point is never freed, whatever its age: its committed phases
// would run again.
const freeable = `expires_at <= now() AND (owner_token IS NULL OR (lease_until <= now() AND recovery_point = ''))`

// Lease and retention arithmetic uses clock_timestamp(), not the
// transaction's start, and never moves lease_until backwards: a commit at
// the end of a long phase must not undo the refreshes made during it.
const (
	leaseFrom     = `clock_timestamp() + $%d::bigint * interval '1 microsecond'`
	extendLease   = `lease_until = GREATEST(lease_until, ` + leaseFrom + `)`
	extendExpires = `expires_at = GREATEST(expires_at, ` + leaseFrom + `)`
)

// recordColumns is what RecordInfo is scanned from, in scanRecordInfo's
// order. A completed record's key, operation, attempts and age are gone.
var recordColumns = `coalesce(namespace, ''), coalesce(scope, ''), coalesce(key, ''), coalesce(operation, ''), ` + stateOf("") + `,
    coalesce(recovery_point, ''), phase_state, owner_token::text, extract(epoch FROM lease_until - now())::float8, coalesce(attempts, 0),
    extract(epoch FROM now() - created_at)::float8, extract(epoch FROM expires_at - now())::float8, response_status,
    (owner_token IS NOT NULL AND lease_until <= now() AND expires_at <= now())`

// abandoned matches a record whose owner's lease expired (see Resolve).
const abandoned = byKey + ` AND owner_token IS NOT NULL AND lease_until <= now()`

func newQueries(schema string) queries {
	t := schema + ".records"
	insert := `INSERT INTO ` + t + ` (id, namespace, scope, key, owner_token, operation, fingerprint,
    lease_until, request, background, expires_at, key_derivation)
SELECT $12, $1, $2, $3, $4, $5, $6,
    now() + $7::bigint * interval '1 microsecond', $8, $9, now() + $10::bigint * interval '1 microsecond', $11`
	q := queries{
		schema:    schema,
		insertSQL: insert + ` ON CONFLICT DO NOTHING`,
		// set_config(..., true) is local to the statement's own transaction and
		// read at its commit. As a one-time filter it runs once, before the
		// row is formed, and costs no plan node of its own.
		insertAsyncSQL: insert + ` WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL ON CONFLICT DO NOTHING`,
		readSQL: `SELECT coalesce(operation, ''), fingerprint, ` + stateOf("") + `, owner_token, coalesce(lease_until > now(), false),
    coalesce(extract(epoch FROM lease_until - now()), 0)::float8, expires_at <= now(),
    extract(epoch FROM expires_at - now())::float8, coalesce(recovery_point, ''), phase_state, response_status, response_headers, response_body, body_omitted
FROM ` + t + byKey,
		// The lease condition is checked again here, not only in the read
		// before it: the owner may have refreshed in between.
		takeoverSQL: `UPDATE ` + t + ` SET owner_token = $3, lease_until = ` + fmt.Sprintf(leaseFrom, 4) + `,
    ` + fmt.Sprintf(extendExpires, 5) + `, attempts = attempts + 1` + fence + ` AND lease_until <= now()
RETURNING recovery_point, phase_state, key_derivation`,
		deleteExpiredSQL: `DELETE FROM ` + t + byKey + ` AND ` + freeable,
		advanceSQL: `UPDATE ` + t + ` SET recovery_point = $3, phase_state = $4,
    ` + fmt.Sprintf(extendLease, 5) + `, ` + fmt.Sprintf(extendExpires, 6) + fence,
		// A completed record is remembered for the whole retention from its
		// completion.
		completeSQL: `UPDATE ` + t + ` SET ` + toReceipt + `, fingerprint = $8,
    response_status = $3, response_headers = $4, response_body = $5, body_omitted = $6,
    expires_at = ` + fmt.Sprintf(leaseFrom, 7) + fence,
		// A release also requires the recovery point this execution last
		// saw: if a commit whose acknowledgement was lost did advance it,
		// effects exist and the record must stay.
		releaseSQL: `DELETE FROM ` + t + fence + ` AND recovery_point = $3`,
		yieldSQL:   `UPDATE ` + t + ` SET lease_until = now()` + fence,
		refreshSQL: `UPDATE ` + t + ` SET ` + fmt.Sprintf(extendLease, 3) + fence,
		// The pruner's batches (prune.go). A batch is the records whose
		// expires_at lies in [$1, $2). pruneBoundsSQL finds the ends of the
		// next $3 batches by one index-only walk from where the previous
		// ones ended: the first record past its retention, and every $1-th
		// after it, each marked when the record before it expires in the
		// same instant (a range starting there would also take those
		// before it, more than $1). pruneSQL then deletes the freeable
		// records of a range by one scan of the index on expires_at: no
		// lookup by primary key, no separate row lock (each would write its
		// own WAL record), no ctid, so it runs unchanged on the distributed
		// engines of docs/scaling.md. The bounds are parameters, not a subquery, so
		// that the planner knows the range is small: with a bound it could
		// not see, it estimated the whole backlog and scanned the table; and
		// the range starts at a live record, not where statistics gathered
		// before the last prune still count deleted ones. Starting where the
		// previous batch ended, a batch never walks the index entries of
		// the rows deleted before it, which stay until vacuum. The retention
		// is in both statements: the walk's ends the batches, the delete's
		// does not trust a bound from another statement. Prune sends the
		// deletes of the ranges one walk found in one round trip, each in
		// a transaction of its own.
		//
		// A row another transaction holds (another pruner, a claim deleting
		// the expired record of its key, an operator) would make the delete
		// wait; a wait past lock_timeout ($3) fails the statement with
		// lock_not_available, and Prune runs pruneSkippingSQL for the batch
		// instead, which skips held rows. So does the last batch (fewer than
		// $1 records after its start) and a batch whose records all expire
		// in one instant (an empty range).
		//
		// A batch commits without waiting for its WAL to reach the disk: a
		// batch lost in a crash leaves expired records that the next prune
		// deletes, and any later durable commit (a new claim of a deleted
		// key among them) flushes the WAL that holds the batch, which comes
		// before it.
		pruneBoundsSQL: `SELECT expires_at, coalesce(tied, false) FROM (
    SELECT expires_at, row_number() OVER w AS n, lag(expires_at) OVER w = expires_at AS tied FROM (
        SELECT expires_at FROM ` + t + ` WHERE expires_at >= $2 AND expires_at <= now()
        ORDER BY expires_at LIMIT $1::bigint * $3 + 1) AS walk
    WINDOW w AS (ORDER BY expires_at)) AS numbered
WHERE (n - 1) % $1::bigint = 0
ORDER BY expires_at`,
		pruneSQL: `WITH settings AS (
    SELECT set_config('synchronous_commit', 'off', true) AS async, set_config('lock_timeout', $3, true) AS wait),
gone AS (
    DELETE FROM ` + t + `
    WHERE expires_at >= $1 AND expires_at < $2 AND ` + freeable + `
        AND (SELECT wait FROM settings) IS NOT NULL
    RETURNING 1)
SELECT count(*) FROM gone`,
		// The pruner's batch where pruneSQL would wait or cannot bound its
		// range: the oldest $1 freeable records from $2 on, locked
		// (skipping those another transaction holds) and deleted by primary
		// key. It returns how many it deleted and the last expires_at it
		// reached.
		pruneSkippingSQL: `WITH batch AS (
    SELECT id FROM ` + t + ` AS r, (SELECT set_config('synchronous_commit', 'off', true)) AS async
    WHERE expires_at >= $2 AND ` + freeable + `
    ORDER BY expires_at LIMIT $1 FOR UPDATE OF r SKIP LOCKED),
gone AS (
    DELETE FROM ` + t + ` AS d USING batch WHERE d.id = batch.id
    RETURNING d.expires_at)
SELECT count(*), max(expires_at) FROM gone`,
		// The records Abandoned(ctx, true, ...) would list.
		countStuckSQL: `SELECT count(*) FROM ` + t + `
WHERE expires_at <= now() AND owner_token IS NOT NULL AND lease_until <= now()`,
		// The completer's work: abandoned records of background operations
		// ($1) it has not given up on. attempts counts the claim and every
		// takeover: a record that keeps failing (a poisoned request, a phase
		// that panics) is left to an operator instead of being tried forever.
		abandonedBackgroundSQL: `SELECT namespace, scope, key, operation, owner_token, request, fingerprint
FROM ` + t + `
WHERE owner_token IS NOT NULL AND background AND lease_until <= now() AND operation = ANY($1) AND attempts < $3
ORDER BY lease_until LIMIT $2`,
		inspectSQL: `SELECT ` + recordColumns + `
FROM ` + t + byKey,
		abandonedSQL: `SELECT ` + recordColumns + `
FROM ` + t + `
WHERE owner_token IS NOT NULL AND lease_until <= now() AND (NOT $1 OR expires_at <= now())
ORDER BY lease_until LIMIT $2`,
		resolveDeleteSQL: `DELETE FROM ` + t + abandoned,
		// Every expression reads the row as it was: the receipt's
		// fingerprint, from the operation and fingerprint it clears; and,
		// without a retention of the operator's ($5 = 0), the operation's
		// own, from now: the window the record was claimed with (expires_at
		// - created_at, which takeovers only lengthen), so that the answer
		// lasts as long as any execution of the key would have; at least the
		// default retention ($6), should the window have been cut short by
		// hand.
		resolveCompleteSQL: `UPDATE ` + t + ` SET ` + toReceipt + `,
    fingerprint = ` + schema + `.receipt_fingerprint(operation, fingerprint),
    response_status = $2, response_headers = $3, response_body = $4, body_omitted = false,
    expires_at = now() + CASE WHEN $5::bigint > 0 THEN $5::bigint * interval '1 microsecond'
        ELSE GREATEST(expires_at - created_at, $6::bigint * interval '1 microsecond') END` + abandoned,
	}
	// The completed record of a ClaimLast execution, inserted just before
	// its COMMIT. A record already there (a concurrent duplicate that
	// committed first) is a unique violation; an uncommitted one is waited
	// on for at most the claim wait, set for this transaction (by a
	// one-time filter, evaluated before the row is formed) before the
	// insert looks at the index.
	q.insertCompletedSQL = `INSERT INTO ` + t + ` (id, fingerprint, response_status, response_headers, response_body,
    body_omitted, expires_at, created_at, attempts, key_derivation, background, recovery_point)
SELECT $1, $2, $3, $4, $5, $6,
    ` + fmt.Sprintf(leaseFrom, 7) + `, NULL, NULL, NULL, NULL, NULL
WHERE set_config('lock_timeout', $8, true) IS NOT NULL`
	if sqlMutant != nil {
		sqlMutant(&q)
	}
	// The ClaimFirst claim is one pgx batch (one round trip): BEGIN, this
	// read of the record as it stands, the claim's insert (insertSQL: a
	// conflict inserts nothing), and endWait. On a conflict the engine rolls
	// the transaction back and the read says what holds the key. The read
	// sets, for the transaction: lock_timeout, which bounds the insert's wait
	// on a concurrent owner's uncommitted claim (endWait restores it before
	// the phases run); statement_timeout and
	// idle_in_transaction_session_timeout, which bound the open transaction
	// by the lease, since an uncommitted claim cannot be taken over.
	q.claimReadSQL = `SELECT set_config('lock_timeout', $2, true), set_config('statement_timeout', $3, true),
    set_config('idle_in_transaction_session_timeout', $3, true),
    coalesce(r.operation, ''), r.fingerprint, ` + stateOf("r.") + `, r.owner_token, coalesce(r.lease_until > now(), false),
    coalesce(extract(epoch FROM r.lease_until - now()), 0)::float8, coalesce(r.expires_at <= now(), false),
    coalesce(extract(epoch FROM r.expires_at - now()), 0)::float8, r.recovery_point, r.phase_state, r.response_status, r.response_headers, r.response_body, coalesce(r.body_omitted, false)
FROM (SELECT 1) AS one LEFT JOIN ` + t + ` AS r ON r.id = $1`
	// A fenced statement that matches no row divides by zero, which aborts
	// the transaction, so the COMMIT sent with it cannot commit a stale
	// owner's writes.
	fenced := func(update string) string { return `WITH u AS (` + update + ` RETURNING 1) SELECT 1 / count(*) FROM u` }
	q.advanceFencedSQL = fenced(q.advanceSQL)
	q.completeFencedSQL = fenced(q.completeSQL)
	return q
}

// sqlMutant, set only by tests, rewrites the engine's SQL to remove one
// protecting predicate, to show that a named test then fails.
var sqlMutant func(*queries)

func (q queries) insert(ctx context.Context, db execer, async bool, c *claim, op string, fp, payload []byte) (bool, error) {
	sql := q.insertSQL
	if async {
		sql = q.insertAsyncSQL
	}
	tag, err := db.Exec(ctx, sql, q.insertArgs(c, op, fp, payload)...)
	return tag.RowsAffected() == 1, err
}

// insertArgs are insertSQL's arguments for c's claim.
func (q queries) insertArgs(c *claim, op string, fp, payload []byte) []any {
	return []any{c.ns, c.scope, c.key, uuidArg(c.token), op, fp, micros(c.policy.Lease), payload,
		c.policy.Complete == idemtype.CompleteBackground, micros(c.policy.Retention), int16(CurrentKeyDerivation), uuidArg(c.id)}
}

// record is what a conflicting claim reads.
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

func (q queries) read(ctx context.Context, db execer, id [16]byte) (*record, error) {
	return scanRecord(db.QueryRow(ctx, q.readSQL, uuidArg(id)))
}

// scanRecord scans a row of readSQL.
func scanRecord(row pgx.Row) (*record, error) {
	var r record
	var secs, expires float64
	var headers []byte
	err := row.Scan(&r.operation, &r.fingerprint, &r.state, &r.owner,
		&r.live, &secs, &r.pastRetention, &expires, &r.recovery, &r.phaseState, &r.status, &headers, &r.body, &r.bodyOmitted)
	if err != nil {
		return nil, err
	}
	if r.headers, err = parseHeaders(headers); err != nil {
		return nil, err
	}
	r.setTimes(secs, expires)
	return &r, nil
}

// setTimes sets what readSQL gives in seconds: until the lease ends (the
// Retry-After of a 409, at least a second) and until expires_at.
func (r *record) setTimes(lease, expires float64) {
	r.expiresIn = time.Duration(expires * float64(time.Second))
	r.retryAfter = time.Duration(lease * float64(time.Second))
	if r.retryAfter < time.Second {
		r.retryAfter = time.Second
	}
}

// takeover installs c's token on a claimed record whose lease expired, if
// the owner is still the one observed. On success c holds the record's
// recovery point and state.
func (q queries) takeover(ctx context.Context, db execer, c *claim, observed *[16]byte) (bool, error) {
	if observed == nil {
		return false, nil
	}
	err := db.QueryRow(ctx, q.takeoverSQL, uuidArg(c.id), uuidArg(*observed), uuidArg(c.token), micros(c.policy.Lease),
		micros(c.policy.Retention)).Scan(&c.recovery, &c.state, &c.derivation)
	if err == pgx.ErrNoRows {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	c.resumed = true
	return true, nil
}

// deleteExpired frees a record past its retention if it is freeable, and
// reports whether it did.
func (q queries) deleteExpired(ctx context.Context, db execer, id [16]byte) (bool, error) {
	tag, err := db.Exec(ctx, q.deleteExpiredSQL, uuidArg(id))
	return tag.RowsAffected() == 1, err
}

// release deletes c's record if it is still claimed by c at c's recovery
// point, and reports whether it did.
func (q queries) release(ctx context.Context, db execer, c *claim) (bool, error) {
	tag, err := db.Exec(ctx, q.releaseSQL, uuidArg(c.id), uuidArg(c.token), c.recovery)
	return tag.RowsAffected() == 1, err
}

func (q queries) yield(ctx context.Context, db execer, c *claim) error {
	_, err := db.Exec(ctx, q.yieldSQL, uuidArg(c.id), uuidArg(c.token))
	return err
}

func (q queries) refresh(ctx context.Context, db execer, c *claim) (bool, error) {
	tag, err := db.Exec(ctx, q.refreshSQL, uuidArg(c.id), uuidArg(c.token), micros(c.policy.Lease))
	return tag.RowsAffected() == 1, err
}

// claimFirst sends the ClaimFirst claim on conn (see claimReadSQL). When
// the claim was inserted, tx is its transaction, open on conn. Otherwise
// conn's transaction is still open, to be rolled back, and rec is what held
// the key (nil if the holder committed while the insert waited), or err is
// why it failed: a *pgconn.PgError with code lock_not_available when a
// concurrent owner's uncommitted claim held it past the claim wait.
func (q queries) claimFirst(ctx context.Context, conn *pgx.Conn, c *claim, op string, fp, payload []byte) (tx pgx.Tx, rec *record, err error) {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(q.claimReadSQL, uuidArg(c.id), q.claimWait, strconv.FormatInt(c.policy.Lease.Milliseconds(), 10))
	b.Queue(q.insertSQL, q.insertArgs(c, op, fp, payload)...)
	b.Queue(endWait)
	br := conn.SendBatch(ctx, b)
	var r record
	var operation, state, recovery *string
	var secs, expires float64
	var ignore [3]string
	var headers []byte
	var tag pgconn.CommandTag
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&ignore[0], &ignore[1], &ignore[2], &operation, &r.fingerprint, &state, &r.owner, &r.live, &secs,
			&r.pastRetention, &expires, &recovery, &r.phaseState, &r.status, &headers, &r.body, &r.bodyOmitted)
	}
	if err == nil {
		tag, err = br.Exec()
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return nil, nil, err
	case tag.RowsAffected() == 1:
		return br.Tx(), nil, nil
	case state == nil: // the holder committed while the insert waited
		return nil, nil, nil
	}
	if r.headers, err = parseHeaders(headers); err != nil {
		return nil, nil, err
	}
	r.operation, r.state = *operation, *state
	if recovery != nil {
		r.recovery = *recovery
	}
	r.setTimes(secs, expires)
	return nil, &r, nil
}

// commitWith stores c's progress (or, with resp, its response) and commits,
// in one round trip on conn, whose transaction it ends. A stale owner's
// statement matches no row and aborts the transaction: ErrFenced. Other
// failures are classified by commitFailed.
func (q queries) commitWith(ctx context.Context, conn *pgx.Conn, c *claim, phase string, state []byte, resp *Response, omitted bool) error {
	b := &pgx.Batch{}
	if len(state) == 0 {
		state = nil
	}
	if resp == nil {
		// The state as json.RawMessage, which pgx knows as json in every
		// exec mode (a []byte would go as bytea where pgx does not ask).
		b.Queue(q.advanceFencedSQL, uuidArg(c.id), uuidArg(c.token), phase, json.RawMessage(state), micros(c.policy.Lease), micros(c.policy.Retention))
	} else {
		headers, body := appendHeaders(nil, resp.Header), storedBody(resp, omitted)
		b.Queue(q.completeFencedSQL, uuidArg(c.id), uuidArg(c.token), resp.Status, headers, body,
			omitted, micros(c.policy.Retention), receiptFingerprint(c.op.ID, c.fingerprint))
	}
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

// migrationQueries are Migrate's statements on the schema's migrations
// table (migrate.go).
type migrationQueries struct {
	lock, create, versions, appliedVersion, record, forget string
}

func newMigrationQueries(schema string) migrationQueries {
	t := schema + `.migrations`
	return migrationQueries{
		// One Migrate at a time per schema, whatever the process.
		lock: `SELECT pg_advisory_xact_lock(hashtext('idemgen.migrate.' || $1))`,
		create: `CREATE SCHEMA IF NOT EXISTS ` + schema + `;
CREATE TABLE IF NOT EXISTS ` + t + ` (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`,
		versions:       `SELECT version FROM ` + t,
		appliedVersion: `SELECT coalesce(max(version), 0) FROM ` + t,
		record:         `INSERT INTO ` + t + ` (version, name) VALUES ($1, $2)`,
		forget:         `DELETE FROM ` + t + ` WHERE version = $1`,
	}
}

// The transaction control the engine and its phase transactions send
// (engine.go, tx.go).
const (
	beginSQL    = `BEGIN`
	commit      = `COMMIT`
	rollbackSQL = `ROLLBACK`
	// commitAsync commits without waiting for the WAL flush
	// (Options.AsyncClaimCommit).
	commitAsync = `SET LOCAL synchronous_commit = off; COMMIT`
	// endWait restores lock_timeout after the inline claim's bounded wait.
	endWait = `SET LOCAL lock_timeout TO DEFAULT`
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

// commitLast inserts the completed record of a ClaimLast execution and
// commits, in one round trip on conn (with BEGIN first when the phases sent
// no statement). The claim wait bounds the insert and nothing after it:
// endWait restores lock_timeout before COMMIT runs the phases' deferred
// checks. A failure means, by what failed:
//   - the insert, on the records table's own key: a concurrent duplicate
//     committed first, errLostRace; nothing of this execution remains, and
//     the duplicate's answer is the one to give;
//   - the insert, past the claim wait: a concurrent claim is still
//     uncommitted, an *Error of kind in-flight;
//   - any other refusal (the COMMIT's own: a deferred constraint or
//     trigger of the phases' tables): the error as is, nothing committed;
//   - anything that leaves the outcome unknown: a *commitUnknownError.
func (q queries) commitLast(ctx context.Context, conn *pgx.Conn, begin bool, c *claim, resp *Response, omitted bool) error {
	b := &pgx.Batch{}
	if begin {
		b.Queue(beginSQL)
	}
	insert := b.Len()
	b.Queue(q.insertCompletedSQL, uuidArg(c.id), receiptFingerprint(c.op.ID, c.fingerprint), resp.Status,
		appendHeaders(nil, resp.Header), storedBody(resp, omitted), omitted, micros(c.policy.Retention), q.claimWait)
	b.Queue(endWait)
	b.Queue(commit)
	stmt, err := sendCommit(ctx, conn, b)
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if stmt == insert && errors.As(err, &pe) {
		switch {
		case pe.Code == uniqueViolation && pe.SchemaName == q.schema && pe.TableName == "records" && pe.ConstraintName == "records_pkey":
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
