package idem

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// A claimer is a claim mode (ClaimMode): how a claim is made and, for a
// mode whose claim opens a transaction (an inlineClaimer), how the phases
// run in it commit. Run chooses one per execution, by claimModeOf.
type claimer interface {
	// claim claims c's key: claimed when c holds it (with c.sess open for
	// an inlineClaimer). Otherwise rec is what holds the key, or nil when
	// it must be read.
	claim(ctx context.Context, e *Engine, c *claim, payload []byte) (claimed bool, rec *record, err error)
}

// An inlineClaimer's claim leaves a transaction open (c.sess), in which
// the local phases before the first foreign one run and commit with it,
// in one round trip.
type inlineClaimer interface {
	claimer
	// commit ends c.sess's transaction after the phases ran: it stores
	// their progress (the recovery point phase, with state) or resp, and
	// commits. An error is classified by what failed (store.go).
	commit(ctx context.Context, e *Engine, c *claim, phase string, state func() ([]byte, error), resp *Response, omitted bool) error
	// phaseFailed says what a phase's error means, after the transaction
	// rolled back.
	phaseFailed(e *Engine, c *claim, err error) error
}

// separateClaim is ClaimSeparate: the claim commits on its own, before
// the first phase runs in a transaction of its own.
type separateClaim struct{}

func (separateClaim) claim(ctx context.Context, e *Engine, c *claim, payload []byte) (bool, *record, error) {
	var inserted bool
	err := againIfStale(func() (err error) {
		inserted, err = e.store.claim(ctx, e.opts.AsyncClaimCommit, c, payload)
		return err
	})
	switch {
	case sqlState(err) == lockNotAvailable: // an uncommitted claim (ClaimFirst) holds the key
		return false, nil, errUncommitted
	case err != nil:
		return false, nil, e.storeFailed(ctx, c.op, "claim", err)
	}
	return inserted, nil, nil
}

// firstClaim is ClaimFirst: the claim is inserted in a transaction left
// open on a connection of its own (c.sess), in one round trip (see
// store.claimInTx), and commits with the local phases before the first
// foreign one, or alone when the first phase is foreign.
type firstClaim struct{}

func (firstClaim) claim(ctx context.Context, e *Engine, c *claim, payload []byte) (bool, *record, error) {
	var rec *record
	err := againIfStale(func() error {
		sess, err := e.heldSession(ctx)
		if err != nil {
			if errors.Is(err, errPoolExhausted) {
				return err
			}
			return wrapStore("claim", "connect", err)
		}
		tx, r, err := e.store.claimInTx(ctx, sess.tx.conn, c, payload)
		if tx != nil {
			sess.tx.tx = tx
			c.sess = sess
			return nil
		}
		sess.end() // rolls back what the claim began
		rec = r
		return err
	})
	switch {
	case c.sess != nil:
		return true, nil, nil
	case errors.Is(err, errPoolExhausted):
		return false, nil, errPoolExhausted
	case sqlState(err) == lockNotAvailable: // a concurrent claim is still uncommitted
		return false, nil, errUncommitted
	case err != nil:
		return false, nil, e.storeFailed(ctx, c.op, "claim", err)
	}
	return false, rec, nil
}

func (firstClaim) commit(ctx context.Context, e *Engine, c *claim, phase string, state func() ([]byte, error), resp *Response, omitted bool) error {
	switch {
	case phase == "":
		// The first phase is foreign: the claim commits alone, before
		// anything outside the database happens.
		return e.store.commitClaim(ctx, c.sess.tx.conn, e.opts.AsyncClaimCommit)
	case resp != nil:
		return e.commit(ctx, c.sess.tx.conn, c, phase, nil, resp, omitted)
	}
	st, err := state()
	if err != nil {
		return err
	}
	return e.commit(ctx, c.sess.tx.conn, c, phase, st, nil, false)
}

func (firstClaim) phaseFailed(_ *Engine, _ *claim, err error) error { return err }

// lastClaim is ClaimLast: the claim takes a connection and, for a key
// it has no reason to think held, claims nothing and reads nothing. c.sess
// holds the connection with the transaction still to begin: BEGIN travels
// with the phases' first statement (see phaseTx), and the completed record
// is inserted just before COMMIT (store.commitRecord), whose unique key
// decides: a record holding the key fails the insert, the transaction
// rolls back with everything the phases did, and the claim, decided again,
// reads the key first (c.again) and replays. A new key costs no round
// trip beyond the phases' own; a held one runs the phases and rolls back
// before its read. While more than a quarter of an engine's recent
// ClaimLast claims found their keys held (heldRate), it reads each key
// first instead: one round trip for a replay, one more for a new key.
type lastClaim struct{}

func (lastClaim) claim(ctx context.Context, e *Engine, c *claim, _ []byte) (bool, *record, error) {
	pc, err := e.pool.Acquire(ctx)
	if err != nil {
		return false, nil, e.storeFailed(ctx, c.op, "claim", wrapStore("claim", "connect", err))
	}
	err = primaryOnly(pc.Conn())
	c.readKey = c.again || e.heldKeys.readFirst.Load()
	if err == nil && c.readKey {
		var rec *record
		err = againIfStale(func() (err error) {
			rec, err = e.store.read(ctx, pc.Conn(), c.id, c.placement)
			return err
		})
		if !c.again && (err == nil || errors.Is(err, pgx.ErrNoRows)) {
			e.heldKeys.note(err == nil)
		}
		if err == nil {
			pc.Release()
			return false, rec, nil
		}
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if err != nil {
		pc.Release()
		return false, nil, e.storeFailed(ctx, c.op, "claim", err)
	}
	// A read that finds the key held gives its connection back: such a
	// replay takes no turn. A key claimed keeps the connection for the
	// phases, within a turn (keepFor), and so does a replay that read
	// nothing first, until its insert finds the key held.
	sess, err := e.keepFor(ctx, pc)
	switch {
	case errors.Is(err, errPoolExhausted):
		return false, nil, errPoolExhausted
	case err != nil:
		return false, nil, e.storeFailed(ctx, c.op, "claim", wrapStore("claim", "connect", err))
	}
	c.sess = sess
	return true, nil, nil
}

func (lastClaim) commit(ctx context.Context, e *Engine, c *claim, _ string, _ func() ([]byte, error), resp *Response, omitted bool) error {
	// A completed record is never resumed: it keeps no state.
	err := e.store.commitRecord(ctx, c.sess.tx.conn, c.sess.tx.tx == nil, c, resp, omitted)
	if !c.readKey && (err == nil || errors.Is(err, errLostRace)) {
		e.heldKeys.note(err != nil)
	}
	if err == nil {
		// The claim is the record, committed now (see acquire).
		e.claimed(c)
	}
	if kindOf(err) == idemtype.KindInFlight {
		e.observe(ctx, Event{Kind: EventInFlight, Operation: c.op.ID})
	}
	return err
}

// phaseFailed: the phases may have failed on a concurrent duplicate's rows
// (there was no record to wait on), or on the rows of the execution that
// completed the key (nothing was read before the phases): when a record
// holds the key now, its answer is the one to give.
func (lastClaim) phaseFailed(e *Engine, c *claim, err error) error {
	if errors.Is(err, errLostRace) || errors.Is(err, errStale) {
		return err
	}
	taken, rerr := e.takenMeanwhile(c)
	switch {
	case rerr != nil:
		// Whether a record holds the key is not known: the phases may have
		// failed on its rows, and their error is no answer to give for a
		// key that may be complete. Nothing committed: retryable.
		return e.storeFailed(c.ctx, c.op, "reading the existing record", rerr)
	case taken:
		if !c.readKey {
			e.heldKeys.note(true)
		}
		return errLostRace
	}
	return err
}

// heldRate is how often an engine's ClaimLast claims found their keys
// held (at the record's insert, or by reading first), over windows of
// heldWindow claims: past a quarter of a window, the next reads each key
// first (lastClaim). The counts are approximate under concurrency, as the
// choice of the faster path may be.
type heldRate struct {
	n, held   atomic.Int32
	readFirst atomic.Bool
}

const heldWindow = 64

func (s *heldRate) note(held bool) {
	if held {
		s.held.Add(1)
	}
	if s.n.Add(1) == heldWindow { // one caller ends the window
		s.n.Store(0)
		s.readFirst.Store(s.held.Swap(0)*4 > heldWindow)
	}
}

// takenMeanwhile reports whether a record now holds c's key, after c's
// ClaimLast execution failed and rolled back, or why it could not tell.
func (e *Engine) takenMeanwhile(c *claim) (bool, error) {
	// Again if stale: the failure may be a schema change's, which left the
	// read prepared on the connection stale too.
	err := againIfStale(func() error {
		_, err := e.store.read(c.ctx, e.pool, c.id, c.placement)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// claimModeOf is the claimer of mode (ClaimAuto resolved) for phases.
func claimModeOf[S any](mode ClaimMode, phases []Phase[S]) (claimer, error) {
	local := !slices.ContainsFunc(phases, Phase[S].foreign)
	switch {
	case mode == ClaimLast && !local:
		return nil, errors.New("claim: last needs phases that are all local")
	case mode == ClaimLast, mode == ClaimAuto && local:
		return lastClaim{}, nil
	case mode == ClaimFirst, mode == ClaimAuto:
		return firstClaim{}, nil
	}
	return separateClaim{}, nil
}

// testHooks stop an execution where a race matters, so that a test can
// drive the race deterministically. Each is nil outside tests; they are
// the engine's own, so that tests of other engines run in parallel.
type testHooks struct {
	afterRead func() // acquire, Resolve: a conflicting (or abandoned) record was read, nothing decided yet
	afterEnd  func() // execute: the outcome is stored, released or yielded
}

func (testHooks) run(hook func()) {
	if hook != nil {
		hook()
	}
}

// claim is an execution's hold on a record.
type claim struct {
	op     *Operation
	policy Policy
	ns     string
	scope  string
	key    string
	// requestID is the claiming request's id (KeyedRequest.RequestID).
	requestID string
	id        [16]byte // recordID(ns, scope, key)
	// placement is where the record is placed (store.placeOf): "" where
	// the records table has no placement column. given is the request's
	// own (KeyedRequest.Placement), which keys the replay cache.
	placement, given string
	// naturalKey is the request's (KeyedRequest.NaturalKey), which its
	// receipt keeps: nil for none.
	naturalKey []byte
	token      [16]byte
	recovery   string          // last committed phase, "" for none
	state      json.RawMessage // state saved with the recovery point
	resumed    bool
	// crossedFailover: the takeover found the record last written on
	// another timeline than the primary's (migration 006).
	crossedFailover bool
	phase           string    // the phase running, or the last one run
	began           time.Time // when the claim was asked for
	// releaseRefused: the phase asked for a release after a phase had
	// committed; the failure is treated as ambiguous.
	releaseRefused bool
	// fingerprint, derivation and keyLength determine the derived keys of
	// foreign phases; a resumed execution has the record's.
	fingerprint []byte
	derivation  keyDerivation
	// scopeDigest is scopeDigest(scope): what the record keeps of the
	// scope, and what derivations from V3 on hash.
	scopeDigest string
	keyLength   int
	background  bool // run by the completer
	// waiting: the request waits for an execution in flight (await), and
	// its claims wait on no lock.
	waiting bool
	// again: an execution of the request lost its key to a record; a
	// ClaimLast claim reads the key first. readKey: it did.
	again, readKey bool
	// noWait: the request waits for no execution in flight (Prefer:
	// wait=0, NoWait), nor on an uncommitted claim's lock.
	noWait bool
	keeper *keeper // refreshes the lease while the execution runs
	// mode is how the claim was made, and how its transaction commits.
	mode claimer
	// sess is the claim's own open transaction (ClaimFirst, ClaimLast), in
	// which the local phases before the first foreign one run, until it
	// commits.
	sess *session
	// ctx is the request's context, detached from its cancellation: the
	// execution's events and logs carry it (its trace) to the end.
	ctx context.Context
	// call is what ExecutionFrom returns to the phases (here, not allocated on
	// its own).
	call Execution
}

func newToken() [16]byte {
	var t [16]byte
	rand.Read(t[:])
	t[6] = (t[6] & 0x0f) | 0x40 // a version 4 UUID, for readable logs
	t[8] = (t[8] & 0x3f) | 0x80
	return t
}

// acquire claims req's key in mode, or decides what the record holding it
// means. It returns a claim to execute, or an outcome (a replay), or an
// error. again: an execution of the request lost its key to a record
// (errLostRace), and a ClaimLast claim reads the key first.
func (e *Engine) acquire(ctx context.Context, op *Operation, p Policy, mode claimer, req KeyedRequest, again bool) (*claim, *Outcome, error) {
	ns := op.namespace()
	if ent := e.cache.get(cacheKey{ns, req.Scope, req.Key, req.Placement}); ent != nil {
		// A completed record, answered from memory: it cannot have changed.
		// Nothing of a claim is made for it (no owner token, no claim).
		if err := e.mismatch(ctx, op, ent.operation, ent.fingerprint, req.Fingerprint); err != nil {
			return nil, nil, err
		}
		e.replayed(ctx, op, p, ent.stored, ent.resp)
		return nil, &Outcome{Response: ent.resp, Replayed: true}, nil
	}
	c := &claim{op: op, policy: p, ns: ns, scope: req.Scope, key: req.Key, requestID: req.RequestID, given: req.Placement, token: newToken(), ctx: ctx, began: time.Now(),
		fingerprint: req.Fingerprint, derivation: currentKeyDerivation, keyLength: e.keyLength(), mode: mode, again: again}
	if req.ScopePublic {
		// The record may keep the scope itself (version 2 hashes it), so
		// that the background completer's phases see it.
		c.derivation = keyDerivationV2
	}
	if err := e.detect(ctx); err != nil {
		if errors.Is(err, errPoolExhausted) {
			return nil, nil, err
		}
		return nil, nil, e.storeFailed(ctx, op, "claim", err)
	}
	c.id = recordID(c.ns, c.scope, c.key)
	c.placement = e.store.placeOf(req.Placement, c.id)
	if req.NaturalKey != nil {
		c.naturalKey = naturalKeyOf(c.ns, c.scope, req.NaturalKey)
	}
	c.scopeDigest = scopeDigest(c.scope)
	var payload []byte
	if p.Complete == idemtype.CompleteBackground {
		payload = req.Payload
	}
	w := waitState{}
	w.budget, _ = waitBudget(p, req)
	// A request that waits for no execution in flight (Prefer: wait=0,
	// NoWait) waits on no claim's lock either: 409 at once.
	c.noWait = w.budget == 0
	defer w.observe(ctx, e, op)
	var next *record // a completed record a wait handed back, to decide on
	for attempt := 0; attempt < maxAttempts; {
		rec := next
		next = nil
		if rec == nil {
			claimed, r, err := mode.claim(ctx, e, c, payload)
			switch {
			case errors.Is(err, errUncommitted):
				// A concurrent claim, not committed yet, holds the key past
				// the claim wait: wait for it, or answer 409.
				if next, err = e.await(ctx, c, &w, time.Second, true); err != nil {
					return nil, nil, err
				}
				continue
			case err != nil:
				return nil, nil, err
			case claimed:
				if _, last := mode.(lastClaim); !last {
					// A ClaimLast claim is observed when its record commits
					// (lastClaim.commit): until then it may be a retry of
					// a completed key.
					e.claimed(c)
				}
				return c, nil, nil
			}
			rec = r
		}
		var err error
		if rec == nil {
			// A separate claim reads what holds the key; the others read
			// again only if the holder committed while they looked.
			err = againIfStale(func() (err error) {
				rec, err = e.store.read(ctx, e.pool, c.id, c.placement)
				return err
			})
		}
		e.hooks.run(e.hooks.afterRead)
		if errors.Is(err, pgx.ErrNoRows) {
			attempt++
			continue // released or pruned since the insert: try again
		}
		if err != nil {
			return nil, nil, e.storeFailed(ctx, op, "reading the existing record", err)
		}
		if rec.pastRetention && (rec.state == stateCompleted || !rec.live) {
			// Past retention: the key is free again, unless the delete's own
			// predicates find the owner live again or a committed phase.
			freed, err := e.store.deleteExpired(ctx, c.id, c.placement)
			if err != nil {
				return nil, nil, e.storeFailed(ctx, op, "freeing an expired record", err)
			}
			if freed || rec.state == stateCompleted {
				// Freed: claim again. A completed record past its retention
				// always matches the delete: matching nothing, it was
				// deleted (and the key perhaps claimed again) by a
				// concurrent retry since it was read, and what holds the
				// key now is read again, never the deleted record replayed.
				attempt++
				continue
			}
		}
		if err := e.mismatch(ctx, op, rec.operation, rec.fingerprint, req.Fingerprint); err != nil {
			return nil, nil, err
		}
		switch {
		case rec.state == stateCompleted:
			if !w.began.IsZero() {
				// A waiter that looked itself hands what it found to the
				// key's other waiters.
				e.waits.settle(c.id, rec)
			}
			return nil, &Outcome{Response: e.replayCompleted(ctx, op, p, cacheKey{c.ns, c.scope, c.key, req.Placement}, rec), Replayed: true}, nil
		case rec.live:
			// An execution in flight holds the key: wait for its answer, or
			// answer 409.
			if next, err = e.await(ctx, c, &w, rec.retryAfter, false); err != nil {
				return nil, nil, err
			}
			continue
		}
		var ok bool
		err = againIfStale(func() (err error) {
			ok, err = e.store.takeover(ctx, c, rec.owner)
			return err
		})
		if err != nil {
			return nil, nil, e.storeFailed(ctx, op, "takeover", err)
		}
		if ok {
			e.observe(ctx, Event{Kind: EventTakeover, Operation: op.ID, Cause: TakeoverExpired})
			e.observeFailover(ctx, c)
			return c, nil, nil
		}
		// The owner refreshed, or someone else took it over or finished it
		// first: look again.
		attempt++
	}
	e.observe(ctx, Event{Kind: EventInFlight, Operation: op.ID})
	return nil, nil, &Error{Kind: idemtype.KindInFlight, RetryAfter: time.Second, Detail: "the key is contended; retry later"}
}

// claimed observes that c claimed its key.
func (e *Engine) claimed(c *claim) {
	e.observe(c.ctx, Event{Kind: EventClaim, Operation: c.op.ID, Retention: c.policy.Retention})
	if e.requests.claimed(c.ns, c.scope, c.key, c.fingerprint, c.began) {
		e.observe(c.ctx, Event{Kind: EventSameRequestNewKey, Operation: c.op.ID})
	}
}

// errUncommitted is a claim's answer when a concurrent claim of its key,
// not committed yet, held it past the claim wait (lock_not_available).
var errUncommitted = errors.New("idem: an uncommitted claim holds the key")

// waitState is a request's wait for the execution in flight that holds its
// key: its budget, and, once it began, until when it may wait.
type waitState struct {
	budget   time.Duration
	began    time.Time // zero until the wait begins
	deadline time.Time
	cause    string // how it ended: WaitAnswered unless set
}

// await waits for the execution in flight that holds c's key (committed,
// its lease running leaseLeft more; or not committed yet), as long as w's
// budget lasts: it returns the completed record that holds the key now, or
// nil to look at the key again (released, or its owner's lease ran out);
// or the 409 to answer, when the budget is spent or was none, or the
// request's context ended.
func (e *Engine) await(ctx context.Context, c *claim, w *waitState, leaseLeft time.Duration, uncommitted bool) (*record, error) {
	now := time.Now()
	if w.began.IsZero() && w.budget > 0 {
		w.began, w.deadline = now, now.Add(w.budget)
		// From now on a claim waits on no lock: an uncommitted claim's
		// commit is seen by the watcher, with no connection held.
		c.waiting = true
	}
	var err error
	if w.budget > 0 && now.Before(w.deadline) {
		var rec *record
		if rec, err = e.waits.wait(ctx, c.id, c.placement, w.deadline, uncommitted); err == nil {
			return rec, nil
		}
	}
	switch {
	case err == nil || errors.Is(err, errBudgetSpent):
		w.cause, err = WaitBudgetSpent, nil
	default:
		w.cause = WaitClientGone
	}
	e.observe(ctx, Event{Kind: EventInFlight, Operation: c.op.ID})
	return nil, inFlight(e.retryAfter(c.op, leaseLeft), err)
}

// observe reports the wait, if one began, when the request's claim is
// decided.
func (w *waitState) observe(ctx context.Context, e *Engine, op *Operation) {
	if w.began.IsZero() {
		return
	}
	cause := w.cause
	if cause == "" {
		cause = WaitAnswered
	}
	e.observe(ctx, Event{Kind: EventWait, Operation: op.ID, Duration: time.Since(w.began), Cause: cause})
}

// mismatch reports a key first used by another operation of its group, or
// with another request: 422. A completed record keeps no operation (recOp
// is ""): its fingerprint is receiptFingerprint's, which covers both.
func (e *Engine) mismatch(ctx context.Context, op *Operation, recOp string, recFP, fp []byte) error {
	if sameRequest(op, recOp, recFP, fp) {
		return nil
	}
	e.observe(ctx, Event{Kind: EventMismatch, Operation: op.ID})
	detail := "this key was first used with a different request"
	switch {
	case recOp == "":
		detail = "this key was first used with a different request, or for another operation"
	case recOp != op.ID:
		detail = fmt.Sprintf("this key was first used for operation %s", recOp)
	}
	return &Error{Kind: idemtype.KindMismatch, Detail: detail}
}

// sameRequest reports whether a record of operation recOp and fingerprint
// recFP was made by a request of op with fingerprint fp.
func sameRequest(op *Operation, recOp string, recFP, fp []byte) bool {
	return recOp == "" && string(recFP) == string(receiptFingerprint(op.ID, fp)) ||
		recOp == op.ID && string(recFP) == string(fp)
}

// replayCompleted answers a completed record of key: its stored response
// (replay), observed as a replay and remembered in the replay cache.
func (e *Engine) replayCompleted(ctx context.Context, op *Operation, p Policy, key cacheKey, rec *record) *Response {
	now := time.Now()
	// The record expires a retention after its answer was stored.
	stored := now.Add(rec.expiresIn - p.Retention)
	resp := e.replay(rec)
	e.replayed(ctx, op, p, stored, resp)
	e.cache.put(key, rec.operation, rec.fingerprint, resp, now.Add(min(rec.expiresIn, e.opts.ReplayCacheTTL)), stored)
	return resp
}

// replayed observes the replay of resp, an answer stored at stored.
func (e *Engine) replayed(ctx context.Context, op *Operation, p Policy, stored time.Time, resp *Response) {
	e.observe(ctx, Event{Kind: EventReplay, Operation: op.ID, Age: max(time.Since(stored), 0), Retention: p.Retention, Status: resp.Status})
}

// replay returns a completed record's stored response, or, when its body
// was too large to store, the response-not-stored problem: never a success
// with its body silently missing.
func (e *Engine) replay(rec *record) *Response {
	if !rec.bodyOmitted {
		return rec.response()
	}
	status := 0
	if rec.status != nil {
		status = *rec.status
	}
	return e.refusal(&Error{Kind: idemtype.KindNotStored, Detail: fmt.Sprintf(
		"the request completed with status %d, but its response body exceeded the replay limit and was not stored", status)})
}

// inFlight is the 409 for a key that another execution holds, uncommitted
// or live: the client retries after retryAfter.
func inFlight(retryAfter time.Duration, err error) *Error {
	return &Error{Kind: idemtype.KindInFlight, RetryAfter: retryAfter, Err: err,
		Detail: "another request with this key is being processed; retry later"}
}

// unavailable reports a store failure: before anything was claimed, or on
// a last-mode commit whose outcome is unknown. Either way the client may
// retry at once; the retry finds out.
func unavailable(step string, err error) *Error {
	return &Error{Kind: idemtype.KindUnavailable, RetryAfter: time.Second, Detail: "the idempotency store did not answer (" + step + ")", Err: err}
}

// againIfStale runs f, and once more if it failed because a statement pgx
// had prepared no longer fits the tables (a column changed type: "cached
// plan must not change result type") or is gone (DEALLOCATE ALL, a pooler
// that lost it). pgx's statement cache forgets such a statement when it
// fails, so the second run prepares it afresh. f must be safe to run again
// after such a failure: a read, or a round trip that committed nothing.
func againIfStale(f func() error) error {
	err := f()
	if stale(err) {
		err = f()
	}
	return err
}

// observeFailover observes a takeover that crossed a failover.
func (e *Engine) observeFailover(ctx context.Context, c *claim) {
	if c.crossedFailover {
		e.observe(ctx, Event{Kind: EventPrimaryChanged, Operation: c.op.ID})
	}
}

// derivationScope is the scope as c's derivation hashes it, and as its
// record keeps it: the scope itself up to keyDerivationV2 (a record
// claimed before V3, or for a public scope), its digest from V3 on.
func (c *claim) derivationScope() string {
	if c.derivation >= keyDerivationV3 {
		return c.scopeDigest
	}
	return c.scope
}
