package idem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
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
// there; the others run on the pool. docs/internals.md, "What protects a
// record", names the clause of each statement that protects a record and
// the test that fails without it.
type store struct {
	pool   *pgxpool.Pool
	schema string
	// claimWait is Options.ClaimWait for lock_timeout, in milliseconds.
	claimWait string
	// qs is the statements in use: plain's until detect finds the records
	// table distributed by Citus, citus's from then on.
	qs           atomic.Pointer[statements]
	plain, citus *statements
	dist         atomic.Bool // detect found the records table on Citus
	// placementType is the type of the records table's placement column,
	// "" where it has none (placement.go); set by detect.
	placementType string
	// recording: the placement column is not yet in the records table's
	// key (a move to the placement layout under way, placement.go): the
	// statements write each record's placement and find records by id.
	recording bool
	detected  atomic.Bool
	detecting sync.Mutex
	// timelineOff, when set, is told once that the store refuses what
	// timeline() reads (detect), with the refusal.
	timelineOff func(ctx context.Context, err error)
}

func newStore(pool *pgxpool.Pool, schema string, claimWait time.Duration) (*store, error) {
	plain, err := loadStatements(schema, false)
	if err != nil {
		return nil, err
	}
	citus, err := loadStatements(schema, true)
	if err != nil {
		return nil, err
	}
	// lock_timeout counts milliseconds, and reads 0 as no limit at all: a
	// wait under a millisecond is rounded up.
	ms := int64((claimWait + time.Millisecond - 1) / time.Millisecond)
	s := &store{pool: pool, schema: schema, claimWait: strconv.FormatInt(ms, 10), plain: &plain, citus: &citus}
	s.qs.Store(s.plain)
	return s, nil
}

// q is the statements in use.
func (s *store) q() *statements { return s.qs.Load() }

// distributed reports whether detect found the records table distributed.
func (s *store) distributed() bool { return s.dist.Load() }

// detect finds out, once, whether the records table is a Citus table
// (distributed, or a reference or local table Citus manages): Citus sends a
// statement on it to a worker and refuses some of what the plain
// statements do there, so the engine then uses sql/citus/*.sql's in their
// place. It is called before the store's first statement on each path
// (a claim, the completer, the pruner, an operator's call) and costs an
// atomic load once it has succeeded; a failure (the database unreachable)
// is tried again on the next call. A table distributed while services run
// is seen by those started after it (docs/scaling.md).
func (s *store) detect(ctx context.Context) error {
	if s.detected.Load() {
		return nil
	}
	s.detecting.Lock()
	defer s.detecting.Unlock()
	if s.detected.Load() {
		return nil
	}
	var citus, standby bool
	err := s.pool.QueryRow(ctx, detectCitus).Scan(&citus, &standby)
	if err == nil && standby {
		err = ErrStandby
	}
	if err == nil && citus {
		err = s.pool.QueryRow(ctx, detectDistributed, s.schema+".records").Scan(&citus)
	}
	if err == nil {
		err = s.pool.QueryRow(ctx, detectPlacement, s.schema+".records").Scan(&s.placementType, &s.recording)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if err != nil {
		return &storeError{op: "detect", stmt: "DetectCitus", err: err}
	}
	q := s.plain
	if citus {
		q = s.citus
	}
	timeline := true
	// The primary's timeline (migration 006) is read with every claim and
	// recovery point; a managed PostgreSQL may refuse what it reads
	// (pg_current_wal_lsn: permission denied, or not supported). Then the
	// statements read no timeline, and the failover signal is off, rather
	// than every claim failing.
	var tl *int32
	if err := s.pool.QueryRow(ctx, "SELECT "+s.schema+".timeline()").Scan(&tl); err != nil {
		if !timelineRefused(err) {
			return &storeError{op: "detect", stmt: "Timeline", err: err}
		}
		timeline = false
		if s.timelineOff != nil {
			s.timelineOff(ctx, &storeError{op: "detect", stmt: "Timeline", err: err})
		}
	}
	if !timeline || s.placementType != "" {
		l, lerr := loadLayout(s.schema, layout{citus: citus, timeline: timeline, placement: s.placementType != "", recording: s.recording, placementType: s.placementType})
		if lerr != nil {
			return lerr
		}
		q = &l
	}
	s.dist.Store(citus)
	s.qs.Store(q)
	s.detected.Store(true)
	return nil
}

// timelineRefused reports whether err is the store refusing what
// timeline() reads, for good: no privilege, not supported (a managed
// service's own PostgreSQL), no such function.
func timelineRefused(err error) bool {
	switch sqlState(err) {
	case "42501", "0A000", "42883":
		return true
	}
	return false
}

// The statements of detect: whether Citus' catalog exists, and then
// whether it holds the records table (two statements, since a query that
// names a table that does not exist fails to plan).
const (
	detectCitus       = `SELECT to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL, pg_is_in_recovery()`
	detectDistributed = `SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = to_regclass($1))`
	// detectPlacement is the type of the records table's placement column
	// (idemmigrate's placement layout), and whether the column is still out
	// of the table's primary key (a move to that layout under way); no row
	// where it has none.
	detectPlacement = `SELECT format_type(a.atttypid, a.atttypmod), NOT EXISTS (SELECT FROM pg_catalog.pg_index i
			WHERE i.indrelid = a.attrelid AND i.indisprimary AND a.attnum = ANY (i.indkey))
		FROM pg_catalog.pg_attribute AS a
		WHERE a.attrelid = to_regclass($1) AND a.attname = 'placement' AND NOT a.attisdropped`
)

// placed reports whether the statements find records by placement and id
// (the placement layout), rather than by id alone.
func (s *store) placed() bool { return s.placementType != "" && !s.recording }

// placeOf is the placement of the record of id for a request whose
// operation gives it value, in the store's layout: "" where the records
// table has no placement column. It is called after detect.

func (s *store) placeOf(value string, id [16]byte) string {
	if s.placementType == "" {
		return ""
	}
	return placementOf(value, id, s.placementType)
}

// citusWait is what a statement on a Citus records table that may wait
// for a row lock is preceded by, in its transaction: the claim wait (or
// the pruner's) set with SET LOCAL, which Citus sends on to the worker
// that waits (citus.propagate_set_commands = 'local', itself local to the
// transaction), and, with async, synchronous_commit off there too. It keeps
// the lock_timeout it found in idemgen.lock_timeout, for citusRestore.
func citusWait(ms string, async bool) string {
	sync := ""
	if async {
		sync = " SET LOCAL synchronous_commit = off;"
	}
	return "DO $$BEGIN PERFORM set_config('idemgen.lock_timeout', current_setting('lock_timeout'), true); " +
		"SET LOCAL citus.propagate_set_commands = 'local'; SET LOCAL lock_timeout = '" + ms + "';" + sync + " END$$"
}

// citusRestore gives the transaction back the lock_timeout citusWait
// found, on the coordinator and the workers alike: the phases after a
// claim, and the COMMIT that runs their deferred checks, wait as they
// would without it.
const citusRestore = "DO $$BEGIN EXECUTE format('SET LOCAL lock_timeout = %L', current_setting('idemgen.lock_timeout')); END$$"

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
	return &claimParams{LockTimeout: wait, ID: uuidArg(c.id), Placement: c.placement, Namespace: c.ns, Scope: c.derivationScope(), Key: c.key, OwnerToken: uuidArg(c.token),
		Operation: c.op.ID, Fingerprint: c.fingerprint, LeaseUS: micros(c.policy.Lease), Request: payload,
		Background: c.policy.Complete == idemtype.CompleteBackground, RetentionUS: micros(c.policy.Retention),
		KeyDerivation: int16(c.derivation), DerivedKeyLength: int16(c.keyLength)}
}

// waitOf is how long c's claim waits for an uncommitted claim of its key,
// in milliseconds (lock_timeout, where 0 would wait for ever): the claim
// wait, or a millisecond once the request waits for the execution in
// flight, whose commit the watcher sees without a connection held.
func (s *store) waitOf(c *claim) string {
	if c.waiting || c.noWait {
		return "1"
	}
	return s.claimWait
}

// lastWaitOf is waitOf for a last-mode claim, whose insert comes after its
// phases: a request that waits for no execution in flight waits on no
// lock; a waiting one waits for the claim wait, as its phases ran already.
func (s *store) lastWaitOf(c *claim) string {
	if c.noWait {
		return "1"
	}
	return s.claimWait
}

// owner is what fences c's statements: its record and its token.
func (c *claim) owner() *ownerParams {
	return &ownerParams{ID: uuidArg(c.id), Placement: c.placement, OwnerToken: uuidArg(c.token)}
}

// claim inserts c's record (Claim, or ClaimAsync) and reports whether it
// did: false when the key is held. An uncommitted claim that holds the key
// past the claim wait fails it with lock_not_available.
func (s *store) claim(ctx context.Context, async bool, c *claim, payload []byte) (bool, error) {
	q := s.q()
	st := &q.Claim
	if async {
		st = &q.ClaimAsync
	}
	if s.distributed() {
		return s.claimCitus(ctx, async, st, c, payload)
	}
	var tag pgconn.CommandTag
	err := s.pool.AcquireFunc(ctx, func(pc *pgxpool.Conn) error {
		if err := primaryOnly(pc.Conn()); err != nil {
			return err
		}
		var err error
		tag, err = pc.Exec(ctx, st.sql, st.args(c.claimParams(payload, s.waitOf(c)))...)
		return wrapStore("claim", st.name, err)
	})
	return tag.RowsAffected() == 1, wrapStore("claim", "connect", err)
}

// ErrStandby is a store error: the database the pool reached is a standby
// (in recovery), where the engine refuses to claim. The records' unique
// key is enforced on the primary alone, and a standby that lags does not
// show a record just committed there: a retry routed to it would claim the
// key again. It answers 503 with Retry-After (a failover may promote the
// node, or the pool may reach the primary again); point the pool at the
// primary (target_session_attrs=read-write in a multi-host URL).
var ErrStandby = errors.New("idem: the idempotency store is a standby (in recovery): keys are claimed on the primary only; point the pool at the primary (target_session_attrs=read-write)")

// primaryOnly refuses conn when its server is a standby, as the server
// said when the connection was made or since (in_hot_standby, which
// PostgreSQL 14 and later report; a demoted primary a pool reconnects to
// says so on the new connection).
func primaryOnly(conn *pgx.Conn) error {
	if conn.PgConn().ParameterStatus("in_hot_standby") == "on" {
		return wrapStore("claim", "connect", ErrStandby)
	}
	return nil
}

// claimCitus is claim on a Citus records table: the claim wait set for
// the worker and the insert, in a transaction of their own (citusTx).
func (s *store) claimCitus(ctx context.Context, async bool, st *stmt[claimParams], c *claim, payload []byte) (bool, error) {
	var tag pgconn.CommandTag
	err := s.citusTx(ctx, "claim", s.waitOf(c), async, st.sql, st.args(c.claimParams(payload, s.waitOf(c))), func(br pgx.BatchResults) (err error) {
		tag, err = br.Exec()
		return err
	})
	return tag.RowsAffected() == 1, wrapStore("claim", st.name, err)
}

// citusTx runs one statement on a Citus records table in a transaction of
// its own, in one round trip on a connection of its own on the primary:
// BEGIN, citusWait(wait, async), the statement (whose result read reads)
// and COMMIT. A failure leaves the transaction aborted on the connection,
// rolled back before it goes back to the pool. An error is wrapped in a
// storeError of step op naming the statement that failed, but for the
// statement's own error, which the caller names.
func (s *store) citusTx(ctx context.Context, op, wait string, async bool, sql string, args []any, read func(pgx.BatchResults) error) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return &storeError{op: op, stmt: "connect", err: err}
	}
	sess := newSession(pc)
	defer sess.end()
	if err := primaryOnly(pc.Conn()); err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(beginSQL)
	b.Queue(citusWait(wait, async))
	b.Queue(sql, args...)
	b.Queue(commit)
	br := pc.Conn().SendBatch(ctx, b)
	steps := []struct {
		name string
		run  func(pgx.BatchResults) error
	}{
		{"BEGIN", execResult}, {"ClaimWait", execResult}, {"", read}, {"COMMIT", execResult},
	}
	for _, st := range steps {
		if err := st.run(br); err != nil {
			br.Close()
			if st.name == "" {
				return err
			}
			return &storeError{op: op, stmt: st.name, err: err}
		}
	}
	if err := br.Close(); err != nil {
		return &storeError{op: op, stmt: "COMMIT", err: err}
	}
	return nil
}

func execResult(br pgx.BatchResults) error {
	_, err := br.Exec()
	return err
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
func (s *store) read(ctx context.Context, db execer, id [16]byte, placement string) (*record, error) {
	q := s.q()
	rec, err := scanRecord(db.QueryRow(ctx, q.Read.sql, q.Read.args(&idParams{ID: uuidArg(id), Placement: placement})...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	return rec, wrapStore("read", "Read", err)
}

// takeover installs c's token on a claimed record whose lease expired, if
// the owner is still the one observed (Takeover). On success c holds the
// record's recovery point and state.
func (s *store) takeover(ctx context.Context, c *claim, observed *[16]byte) (bool, error) {
	if observed == nil {
		return false, nil
	}
	p := &takeoverParams{ID: uuidArg(c.id), Placement: c.placement, OwnerToken: uuidArg(*observed), NewOwner: uuidArg(c.token),
		LeaseUS: micros(c.policy.Lease), RetentionUS: micros(c.policy.Retention)}
	q := s.q()
	var length pgtype.Int2
	err := s.pool.QueryRow(ctx, q.Takeover.sql, q.Takeover.args(p)...).Scan(&c.recovery, &c.state, &c.derivation, &length, &c.crossedFailover)
	if length.Valid { // else a claim made before migration 007: this engine's length, as before
		c.keyLength = int(length.Int16)
	}
	if err == pgx.ErrNoRows {
		return false, nil
	}
	if err != nil {
		return false, wrapStore("takeover", "Takeover", err)
	}
	c.resumed = true
	return true, nil
}

// deleteExpired frees a record past its retention if it is freeable
// (DeleteExpired), and reports whether it did.
func (s *store) deleteExpired(ctx context.Context, id [16]byte, placement string) (bool, error) {
	tag, err := s.pool.Exec(ctx, s.q().DeleteExpired.sql, s.q().DeleteExpired.args(&idParams{ID: uuidArg(id), Placement: placement})...)
	return tag.RowsAffected() == 1, wrapStore("freeing an expired record", "DeleteExpired", err)
}

// release deletes c's record if it is still claimed by c at c's recovery
// point (Release), and reports whether it did.
func (s *store) release(ctx context.Context, c *claim) (bool, error) {
	p := &releaseParams{ID: uuidArg(c.id), Placement: c.placement, OwnerToken: uuidArg(c.token), RecoveryPoint: c.recovery}
	tag, err := s.pool.Exec(ctx, s.q().Release.sql, s.q().Release.args(p)...)
	return tag.RowsAffected() == 1, wrapStore("release", "Release", err)
}

// yield gives c's lease up at once (Yield).
func (s *store) yield(ctx context.Context, c *claim) error {
	_, err := s.pool.Exec(ctx, s.q().Yield.sql, s.q().Yield.args(c.owner())...)
	return wrapStore("yield", "Yield", err)
}

// refresh extends c's lease (Refresh), and reports whether c still owns it.
func (s *store) refresh(ctx context.Context, c *claim) (bool, error) {
	p := &refreshParams{ID: uuidArg(c.id), Placement: c.placement, OwnerToken: uuidArg(c.token), LeaseUS: micros(c.policy.Lease)}
	tag, err := s.pool.Exec(ctx, s.q().Refresh.sql, s.q().Refresh.args(p)...)
	return tag.RowsAffected() == 1, wrapStore("refresh", "Refresh", err)
}

// claimInTx sends a ClaimFirst claim on conn in one round trip: BEGIN,
// ClaimRead, Claim (a conflict inserts nothing). When the claim
// was inserted, tx is its transaction, open on conn. Otherwise conn's
// transaction is still open, to be rolled back, and rec is what held the
// key (nil if the holder committed while the insert waited), or err is why
// it failed: a *pgconn.PgError with code lock_not_available when a
// concurrent owner's uncommitted claim held it past the claim wait.
func (s *store) claimInTx(ctx context.Context, conn *pgx.Conn, c *claim, payload []byte) (tx pgx.Tx, rec *record, err error) {
	if err := primaryOnly(conn); err != nil {
		return nil, nil, err
	}
	q := s.q()
	citus := s.distributed()
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(q.ClaimRead.sql, q.ClaimRead.args(&claimReadParams{ID: uuidArg(c.id), Placement: c.placement,
		StatementTimeout: strconv.FormatInt(c.policy.Lease.Milliseconds(), 10)})...)
	if citus {
		b.Queue(citusWait(s.waitOf(c), false))
	}
	b.Queue(q.Claim.sql, q.Claim.args(c.claimParams(payload, s.waitOf(c)))...)
	if citus {
		b.Queue(citusRestore)
	}
	br := conn.SendBatch(ctx, b)
	var tag pgconn.CommandTag
	stmt := "BEGIN"
	_, err = br.Exec()
	if err == nil {
		stmt = "ClaimRead"
		rec, err = scanRecord(br.QueryRow())
	}
	if err == nil && citus {
		stmt = "ClaimWait"
		_, err = br.Exec()
	}
	if err == nil {
		stmt = "Claim"
		tag, err = br.Exec()
	}
	if err == nil && citus {
		stmt = "ClaimWaitRestore"
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return nil, nil, wrapStore("claim", stmt, err)
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
		sql = s.q().CommitAsync.sql
	}
	_, err := conn.Exec(ctx, sql)
	return wrapStore("commit", "COMMIT", commitFailed(err))
}

// commitProgress stores c's recovery point phase with its state (Advance)
// and commits, in one round trip on conn, whose transaction it ends. A
// stale owner's statement matches no row and aborts the transaction:
// ErrFenced. Other failures are classified by commitFailed.
func (s *store) commitProgress(ctx context.Context, conn *pgx.Conn, c *claim, phase string, state []byte) error {
	if len(state) == 0 {
		state = nil
	}
	p := &advanceParams{ID: uuidArg(c.id), Placement: c.placement, OwnerToken: uuidArg(c.token), RecoveryPoint: phase, PhaseState: state,
		LeaseUS: micros(c.policy.Lease), RetentionUS: micros(c.policy.Retention)}
	q := s.q()
	return s.commitFenced(ctx, conn, "Advance", q.Advance.sql, q.Advance.args(p))
}

// commitResponse completes c's record with resp (Complete) and commits, in
// one round trip on conn, fenced as commitProgress is.
func (s *store) commitResponse(ctx context.Context, conn *pgx.Conn, c *claim, resp *Response, omitted bool) error {
	p := &completeParams{ID: uuidArg(c.id), Placement: c.placement, OwnerToken: uuidArg(c.token), Fingerprint: receiptFingerprint(c.op.ID, c.fingerprint),
		Status: resp.Status, Headers: appendHeaders(nil, resp.Header), Body: storedBody(resp, omitted), BodyOmitted: omitted,
		RetentionUS: micros(c.policy.Retention), NaturalKey: c.naturalKey}
	q := s.q()
	if c.naturalKey != nil {
		return s.commitFenced(ctx, conn, "CompleteNatural", q.CompleteNatural.sql, q.CompleteNatural.args(p))
	}
	return s.commitFenced(ctx, conn, "Complete", q.Complete.sql, q.Complete.args(p))
}

func (s *store) commitFenced(ctx context.Context, conn *pgx.Conn, name, sql string, args []any) error {
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
	return wrapStore("commit", []string{name, "COMMIT", "COMMIT"}[stmt], commitFailed(err))
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
	citus := s.distributed()
	wait := s.lastWaitOf(c)
	if citus {
		b.Queue(citusWait(wait, false))
	}
	insert := b.Len()
	p := &insertCompletedParams{ID: uuidArg(c.id), Placement: c.placement, Fingerprint: receiptFingerprint(c.op.ID, c.fingerprint), Status: resp.Status,
		Headers: appendHeaders(nil, resp.Header), Body: storedBody(resp, omitted), BodyOmitted: omitted,
		RetentionUS: micros(c.policy.Retention), LockTimeout: wait, NaturalKey: c.naturalKey}
	q := s.q()
	if c.naturalKey != nil {
		b.Queue(q.InsertCompletedNatural.sql, q.InsertCompletedNatural.args(p)...)
	} else {
		b.Queue(q.InsertCompleted.sql, q.InsertCompleted.args(p)...)
	}
	if citus {
		b.Queue(citusRestore)
	}
	b.Queue(commit)
	stmt, err := sendCommit(ctx, conn, b)
	if err == nil {
		return nil
	}
	name := "COMMIT"
	switch {
	case stmt < insert && citus && stmt == insert-1:
		name = "ClaimWait"
	case stmt < insert:
		name = "BEGIN"
	case stmt == insert && c.naturalKey != nil:
		name = "InsertCompletedNatural"
	case stmt == insert:
		name = "InsertCompleted"
	case stmt == insert+1 && citus:
		name = "ClaimWaitRestore"
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
	return wrapStore("commit", name, commitFailed(err))
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
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case featureNotSupported:
		// Only the plan cache's own refusal: the same code from anything
		// else (a trigger, a deferred check, Citus refusing a statement) is
		// the statement's error, never a reason to run it again. The
		// routine's name is not localized, where the message may be.
		return pe.Routine == "RevalidateCachedQuery"
	case invalidStatementName:
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

// watch reads the state of the records ids (Watch): a key with no record
// is missing from the map.
func (s *store) watch(ctx context.Context, ids [][16]byte) (map[[16]byte]keyState, error) {
	args := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		args[i] = uuidArg(id)
	}
	q := s.q()
	rows, err := s.pool.Query(ctx, q.Watch.sql, q.Watch.args(&idsParams{IDs: args})...)
	if err != nil {
		return nil, wrapStore("watch", "Watch", err)
	}
	out := make(map[[16]byte]keyState, len(ids))
	var id pgtype.UUID
	var st int32
	_, err = pgx.ForEachRow(rows, []any{&id, &st}, func() error {
		out[id.Bytes] = keyState(st)
		return nil
	})
	return out, wrapStore("watch", "Watch", err)
}
