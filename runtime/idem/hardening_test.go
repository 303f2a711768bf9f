package idem_test

// Tests for the rules a review found missing: each one failed on the engine
// before its fix (see docs/internals.md, "What protects a record").

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// catch runs f and turns a panic that escapes it into an error.
func catch(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic escaped: %v", r)
		}
	}()
	f()
	return nil
}

// TestCommitNeverShortensLease: a local phase that runs longer than the
// lease commits; a retry that arrives while the owner is at the next
// (foreign) phase must see a live lease (409), not take the key over.
func TestCommitNeverShortensLease(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		op := &idem.Operation{ID: "longLocal", Policy: idem.Policy{Lease: time.Second}}
		var foreignCalls atomic.Int32
		var retryErr error
		var retryOut *idem.Outcome
		// The claim commits first in every mode: a phase in the claim's own
		// transaction is bounded by the lease instead (TestClaimIsBoundedByTheLease).
		phases := committedFirst([]idem.Phase[payState]{
			{Name: "record", Local: func(ctx context.Context, tx pgx.Tx, s *payState) error {
				if _, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ('long')`); err != nil {
					return err
				}
				time.Sleep(1600 * time.Millisecond) // longer than the lease; refreshes keep it
				return nil
			}},
			{Name: "charge", Foreign: func(ctx context.Context, key string, s *payState) error {
				if foreignCalls.Add(1) == 1 {
					// The owner is at the foreign call: a retry arrives now.
					retryOut, retryErr = idem.Run(ctx, e.eng, op, noWait(request("t", "long", "b")), twoPhases("other"))
				}
				return nil
			}},
			{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
				return created("{}"), nil
			}},
		})
		if _, err := idem.Run(ctx, e.eng, op, request("t", "long", "b"), phases); err != nil {
			t.Fatalf("owner: %v", err)
		}
		if kindOf(retryErr) != idemtype.KindInFlight {
			t.Fatalf("retry during the owner's foreign call: %+v, %v; want 409 in-flight (the commit shortened the lease)", retryOut, retryErr)
		}
		if n := e.ev.count(idem.EventTakeover); n != 0 {
			t.Fatalf("%d takeovers of a live owner", n)
		}
	})
}

// halfDone leaves a record of payOp claimed at recovery point "record",
// its lease expired and its retention over: the owner died after the
// first commit and nobody came back for longer than the retention.
func halfDone(t *testing.T, e *env, key string, cd *card, runs *int) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		idem.Run(context.Background(), e.eng, payOp, request("t", key, "b"), threePhases(key, cd, runs, "before-charge"))
	}()
	<-done
	e.exec(`UPDATE `+e.schema+`.records SET lease_until = now() - interval '1 second',
    expires_at = now() - interval '1 second' WHERE key = $1`, key)
}

// TestHalfDoneRecordOutlivesRetention: a record with a committed recovery
// point is never freed, by the claim path or by the pruner: a retry after
// the retention resumes it instead of running committed phases again.
func TestHalfDoneRecordOutlivesRetention(t *testing.T) {
	t.Parallel()
	inModes(t, testHalfDoneRecordOutlivesRetention)
}

func testHalfDoneRecordOutlivesRetention(t *testing.T, m *env) {
	t.Run("claim path", func(t *testing.T) {
		e := m.fresh(t)
		cd, runs := &card{charges: map[string]string{}}, 0
		halfDone(t, e, "k", cd, &runs)
		out, err := idem.Run(context.Background(), e.eng, payOp, request("t", "k", "b"), threePhases("k", cd, &runs, ""))
		if err != nil || !out.Resumed {
			t.Fatalf("retry after retention: %+v, %v; want the execution resumed", out, err)
		}
		if runs != 1 || e.count(`SELECT count(*) FROM rows WHERE key = 'k'`) != 1 {
			t.Fatalf("the committed record phase ran %d times", runs)
		}
	})
	t.Run("pruner", func(t *testing.T) {
		e := m.fresh(t)
		cd, runs := &card{charges: map[string]string{}}, 0
		halfDone(t, e, "k", cd, &runs)
		if n, err := idemadmin.Prune(context.Background(), e.eng, idemadmin.PruneOptions{Batch: 100}); n != 0 || err != nil {
			t.Fatalf("Prune = %d, %v; want the half-done record kept", n, err)
		}
		if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records WHERE recovery_point = 'record'`); n != 1 {
			t.Fatal("the half-done record is gone")
		}
	})
}

// TestRetentionRunsFromProgress: completing (or advancing) a record long
// after it was claimed moves expires_at forward: a completed record is
// remembered for the whole retention from its completion.
func TestRetentionRunsFromProgress(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		// The claim commits first in every mode, so that the record exists while
		// the phase runs.
		phases := committedFirst(twoPhases("k"))
		record := phases[1].Local
		phases[1].Local = func(ctx context.Context, tx pgx.Tx, s *payState) error {
			// The execution has been running for almost the whole retention.
			if _, err := e.pool.Exec(ctx, `UPDATE `+e.schema+`.records SET expires_at = now() + interval '1 second'`); err != nil {
				return err
			}
			return record(ctx, tx, s)
		}
		finish := phases[2].Final
		phases[2].Final = func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
			// The record phase's commit advanced the record: its retention
			// runs from there.
			if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records
WHERE recovery_point = 'record' AND expires_at >= now() + interval '23 hours'`); n != 1 {
				t.Error("a record advanced near its expiry still expires from its claim, not its progress")
			}
			// And it is near its expiry again when it completes.
			if _, err := e.pool.Exec(ctx, `UPDATE `+e.schema+`.records SET expires_at = now() + interval '1 second'`); err != nil {
				return nil, err
			}
			return finish(ctx, tx, s)
		}
		if _, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), phases); err != nil {
			t.Fatal(err)
		}
		if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records
WHERE expires_at >= now() + interval '23 hours'`); n != 1 {
			t.Fatal("a record completed near its expiry still expires from its claim, not its completion")
		}
	})
}

// TestPanicInPhase: a panic is recovered and follows the failure rules: no
// effect committed -> released; after a commit -> ambiguous, kept, resumable.
func TestPanicInPhase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inModes(t, func(t *testing.T, m *env) { testPanicInPhase(ctx, t, m) })
}

func testPanicInPhase(ctx context.Context, t *testing.T, m *env) {
	t.Run("before any commit", func(t *testing.T) {
		e := m.fresh(t)
		phases := twoPhases("k")
		phases[0].Local = func(ctx context.Context, tx pgx.Tx, s *payState) error {
			if _, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ('k')`); err != nil {
				return err
			}
			panic("nil map in phase code")
		}
		var err error
		if perr := catch(func() { _, err = idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), phases) }); perr != nil {
			t.Fatal(perr)
		}
		if err == nil || !strings.Contains(err.Error(), "nil map in phase code") {
			t.Fatalf("err %v; want the panic as an error", err)
		}
		if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records`); n != 0 {
			t.Fatal("the claim was not released")
		}
		if n := e.count(`SELECT count(*) FROM rows`); n != 0 {
			t.Fatal("the panicking phase's writes were committed")
		}
	})
	t.Run("after a commit", func(t *testing.T) {
		e := m.fresh(t)
		cd, runs := &card{charges: map[string]string{}}, 0
		phases := threePhases("k", cd, &runs, "")
		phases[1].Foreign = func(ctx context.Context, key string, s *payState) error { panic("card client bug") }
		var err error
		if perr := catch(func() { _, err = idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), phases) }); perr != nil {
			t.Fatal(perr)
		}
		if kindOf(err) != idemtype.KindFailed {
			t.Fatalf("err %v; want failed (ambiguous)", err)
		}
		out, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), threePhases("k", cd, &runs, ""))
		if err != nil || !out.Resumed || runs != 1 {
			t.Fatalf("retry: %+v, %v (record ran %d times); want a resumed execution", out, err, runs)
		}
	})
	t.Run("background completer", func(t *testing.T) {
		e := m.fresh(t)
		op := &idem.Operation{ID: "bgPanic", Policy: idem.Policy{Lease: 30 * time.Second, Complete: idemtype.CompleteBackground}}
		cd, runs := &card{charges: map[string]string{}}, 0
		idem.RegisterCompleter(e.eng, op, func(payload []byte) ([]idem.Phase[payState], error) {
			phases := threePhases("k", cd, &runs, "")
			phases[1].Foreign = func(ctx context.Context, key string, s *payState) error { panic("poisoned record") }
			return phases, nil
		})
		done := make(chan struct{})
		go func() {
			defer close(done)
			idem.Run(ctx, e.eng, op, request("t", "k", "k"), threePhases("k", cd, &runs, "before-charge"))
		}()
		<-done
		failures := 0
		for i := 0; i < 10; i++ {
			e.expireLeases()
			var n int
			var err error
			if perr := catch(func() { n, err = idemadmin.CompleteAbandoned(ctx, e.eng, 10) }); perr != nil {
				t.Fatal(perr)
			}
			if n != 0 {
				t.Fatalf("a poisoned record was completed")
			}
			if err != nil {
				if !strings.Contains(err.Error(), "poisoned record") {
					t.Fatalf("completer error %v; want the panic", err)
				}
				failures++
			}
		}
		if failures == 0 || failures >= 10 {
			t.Fatalf("the completer failed on the poisoned record %d times in 10 passes; want a bounded number of tries", failures)
		}
		if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records WHERE owner_token IS NOT NULL AND recovery_point = 'record'`); n != 1 {
			t.Fatal("the poisoned record was not kept for an operator")
		}
	})
}

// TestDerivedKeyFollowsTheRequest: a released key reused with another body
// must not present the foreign system the same key with other parameters.
func TestDerivedKeyFollowsTheRequest(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var keys []string
		phases := []idem.Phase[payState]{
			{Name: "charge", Foreign: func(ctx context.Context, key string, s *payState) error {
				keys = append(keys, key)
				return idem.Release(errors.New("card declined before any effect"))
			}},
			{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
				return created("{}"), nil
			}},
		}
		for _, body := range []string{`{"amount":100}`, `{"amount":999}`} {
			if _, err := idem.Run(ctx, e.eng, payOp, request("t", "k", body), phases); err == nil {
				t.Fatal("want the release error")
			}
		}
		if len(keys) != 2 || keys[0] == keys[1] {
			t.Fatalf("derived keys %q; want a different key for a different request", keys)
		}
		for _, k := range keys {
			if len(k) > idem.MaxDerivedKeyLength {
				t.Fatalf("derived key %q longer than %d", k, idem.MaxDerivedKeyLength)
			}
		}
	})
}

// TestInvalidPolicyIsRefused: a lease under a second, or negative, is an
// error before anything is claimed, never a panic.
func TestInvalidPolicyIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, lease := range []time.Duration{-time.Second, 500 * time.Millisecond} {
		op := &idem.Operation{ID: "badLease", Policy: idem.Policy{Lease: lease}}
		var err error
		if perr := catch(func() {
			_, err = idem.Run(context.Background(), e.eng, op, request("t", fmt.Sprint(lease), "b"), twoPhases("k"))
		}); perr != nil {
			t.Fatalf("lease %v: %v", lease, perr)
		}
		if err == nil || !strings.Contains(err.Error(), "lease") {
			t.Fatalf("lease %v: err %v; want the policy refused", lease, err)
		}
	}
	if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records`); n != 0 {
		t.Fatalf("%d records claimed under an invalid policy", n)
	}
	if n := e.count(`SELECT count(*) FROM rows`); n != 0 {
		t.Fatal("phases ran under an invalid policy")
	}
}

// TestFirstResponseIsTheStoredForm: the first answer carries exactly the
// headers every replay will carry, so the two are byte-identical.
func TestFirstResponseIsTheStoredForm(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		first, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), twoPhases("k"))
		if err != nil {
			t.Fatal(err)
		}
		again, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), twoPhases("k"))
		if err != nil || !again.Replayed {
			t.Fatalf("replay: %+v, %v", again, err)
		}
		if !sameResponse(first.Response, again.Response) {
			t.Fatalf("first answer and replay differ:\nfirst  %d %v\nreplay %d %v", first.Response.Status, first.Response.Header,
				again.Response.Status, again.Response.Header)
		}
		if first.Response.Header.Get("Set-Cookie") != "" {
			t.Fatal("a never-stored header went out on the first answer")
		}
	})
}

// TestFenceWhileTakerRuns: A stalls past its lease, B takes over and is
// still running its phase when A goes on: whatever A does then (commit a
// phase, complete, release, give up its lease) is fenced by the owner token
// alone, since the record is still claimed, and B completes undisturbed.
func TestFenceWhileTakerRuns(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, m *env) { testFenceWhileTakerRuns(t, m) })
}

func testFenceWhileTakerRuns(t *testing.T, m *env) {
	for _, tc := range []struct {
		name    string
		stallIn string // the phase in which A and B stall
		aErr    error  // what A's phase returns once it goes on
		want    func(error) bool
	}{
		{"advance", "record", nil, func(err error) bool { return errors.Is(err, idem.ErrFenced) }},
		{"complete", "finish", nil, func(err error) bool { return errors.Is(err, idem.ErrFenced) }},
		{"release", "record", idem.Release(errors.New("bad input")), func(err error) bool { return err != nil }},
		{"yield", "finish", errors.New("timeout"), func(err error) bool { return kindOf(err) == idemtype.KindFailed }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := m.fresh(t)
			ctx := context.Background()
			stall := func(owner string, in, proceed chan struct{}, result error) []idem.Phase[payState] {
				// The claim commits first in every mode: a phase in the
				// claim's own transaction has no record to take over.
				phases := committedFirst(twoPhases("k"))
				wait := func(ctx context.Context, tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `INSERT INTO rows (key, note) VALUES ('k', $1)`, owner); err != nil {
						return err
					}
					close(in)
					<-proceed
					return result
				}
				if tc.stallIn == "record" {
					phases[1].Local = func(ctx context.Context, tx pgx.Tx, s *payState) error { return wait(ctx, tx) }
				} else {
					phases[2].Final = func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
						return created(`{"owner":"` + owner + `"}`), wait(ctx, tx)
					}
				}
				return phases
			}
			inA, proceedA := make(chan struct{}), make(chan struct{})
			inB, proceedB := make(chan struct{}), make(chan struct{})
			errA := make(chan error, 1)
			type result struct {
				out *idem.Outcome
				err error
			}
			resB := make(chan result, 1)
			var b result
			startedB := false
			// finishB lets B go on and waits for its end: on failure too, so
			// that B neither outlives the test nor reports to it afterwards.
			finishB := sync.OnceFunc(func() {
				close(proceedB)
				if startedB {
					b = <-resB
				}
			})
			defer finishB()
			go func() {
				_, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), stall("A", inA, proceedA, tc.aErr))
				errA <- err
			}()
			<-inA
			e.expireLeases()
			startedB = true
			go func() {
				out, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), stall("B", inB, proceedB, nil))
				resB <- result{out, err}
			}()
			<-inB // B owns the record and has not committed
			close(proceedA)
			if err := <-errA; !tc.want(err) {
				t.Fatalf("A: %v", err)
			}
			if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records WHERE lease_until > now()`); n != 1 {
				t.Fatal("A's end disturbed B's live claim")
			}
			finishB()
			if b.err != nil || b.out == nil || b.out.Response.Status != 201 {
				t.Fatalf("B: %+v, %v", b.out, b.err)
			}
			if n := e.count(`SELECT count(*) FROM rows WHERE note = 'A'`); n != 0 {
				t.Fatal("A committed after B took over")
			}
			if n := e.count(`SELECT count(*) FROM rows WHERE note = 'B'`); n != 1 {
				t.Fatal("B's row is missing")
			}
		})
	}
}

// TestLargeResponseReplay: a body over MaxReplayBody goes out once in full;
// a replay is the documented problem, never an empty success.
func TestLargeResponseReplay(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		op := &idem.Operation{ID: "big", Policy: idem.Policy{MaxReplayBody: 10}}
		big := []idem.Phase[payState]{{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
			return created(`{"this body is longer than ten bytes":true}`), nil
		}}}
		first, err := idem.Run(ctx, e.eng, op, request("t", "k", "b"), big)
		if err != nil || first.Response.Status != 201 || len(first.Response.Body) < 11 {
			t.Fatalf("first: %+v, %v", first, err)
		}
		again, err := idem.Run(ctx, e.eng, op, request("t", "k", "b"), big)
		if err != nil || !again.Replayed {
			t.Fatalf("replay: %+v, %v", again, err)
		}
		if again.Response.Status == 201 || again.Response.Header.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(string(again.Response.Body), "response-not-stored") {
			t.Fatalf("replay of an unstored body: %d %v %q; want the response-not-stored problem", again.Response.Status,
				again.Response.Header, again.Response.Body)
		}
		if again.Response.Status != http.StatusGone {
			t.Fatalf("status %d; want 410", again.Response.Status)
		}
	})
}

// TestPhasesSeeTheirCall: phases read the scope and key from their context
// on the request path and in the background completer alike.
func TestPhasesSeeTheirCall(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		op := &idem.Operation{ID: "bgCall", Policy: idem.Policy{Lease: 30 * time.Second, Complete: idemtype.CompleteBackground}}
		var seen []idem.Execution
		// The claim commits first in every mode, so that the record phase
		// commits before the final phase dies.
		phases := func(crash bool) []idem.Phase[payState] {
			return committedFirst([]idem.Phase[payState]{
				{Name: "record", Local: func(ctx context.Context, tx pgx.Tx, s *payState) error {
					seen = append(seen, *idem.ExecutionFrom(ctx))
					return nil
				}},
				{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
					seen = append(seen, *idem.ExecutionFrom(ctx))
					if crash {
						runtime.Goexit()
					}
					return created("{}"), nil
				}},
			})
		}
		idem.RegisterCompleter(e.eng, op, func(payload []byte) ([]idem.Phase[payState], error) { return phases(false), nil })
		done := make(chan struct{})
		go func() {
			defer close(done)
			idem.Run(ctx, e.eng, op, request("tenant-7", "k-1", "b"), phases(true))
		}()
		<-done
		e.expireLeases()
		if n, err := idemadmin.CompleteAbandoned(ctx, e.eng, 10); n != 1 || err != nil {
			t.Fatalf("CompleteAbandoned = %d, %v", n, err)
		}
		if len(seen) != 3 {
			t.Fatalf("phases ran %d times, want 3", len(seen))
		}
		for i, c := range seen {
			// The background completer has what the record keeps: the
			// scope's digest (a scope may be a credential).
			scope := "tenant-7"
			if c.Background {
				scope = idemadmin.ScopeDigest("tenant-7")
			}
			if c.Scope != scope || c.Key != "k-1" || c.Operation != "bgCall" {
				t.Errorf("phase run %d saw %+v; want scope %s, key k-1", i, c, scope)
			}
		}
		if seen[0].Background || !seen[2].Background || !seen[2].Resumed {
			t.Errorf("Background/Resumed flags wrong: %+v", seen)
		}
	})
}

// TestDerivationIsVersioned: a record claimed before the derivation changed
// (version 1, version 2) presents the same foreign key when it resumes
// after the upgrade; new claims use version 3, which hashes the scope's
// digest.
func TestDerivationIsVersioned(t *testing.T) {
	t.Parallel()
	// Pinned: what the engine derived before versioning existed.
	if got := idemadmin.DeriveKey(idemadmin.KeyDerivationV1, "createPayment", "tenant", "k", "charge_card", nil, 64); got != "idg-298ce04d20fc7d2d09fdbedd6830206c13db6840d568ee6408de80446415" {
		t.Fatalf("version 1 derivation changed: %s", got)
	}
	inModes(t, testDerivationIsVersioned)
}

func testDerivationIsVersioned(t *testing.T, e *env) {
	ctx := context.Background()
	cd, runs := &card{charges: map[string]string{}}, 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		idem.Run(ctx, e.eng, payOp, request("t", "old", "b"), threePhases("old", cd, &runs, "before-charge"))
	}()
	<-done
	e.exec(`UPDATE ` + e.schema + `.records SET key_derivation = 1`) // as migration 002 leaves a record in flight
	e.expireLeases()
	if _, err := idem.Run(ctx, e.eng, payOp, request("t", "old", "b"), threePhases("old", cd, &runs, "")); err != nil {
		t.Fatal(err)
	}
	if want := idemadmin.DeriveKey(idemadmin.KeyDerivationV1, "createPayment", "t", "old", "charge", nil, 64); len(cd.keys) != 1 || cd.keys[0] != want {
		t.Fatalf("resumed version-1 record sent %v; want %s", cd.keys, want)
	}
	// A record an engine of version 2 claimed keeps its scope, not its
	// digest, and resumes with version 2's key.
	done = make(chan struct{})
	go func() {
		defer close(done)
		idem.Run(ctx, e.eng, payOp, request("t", "mid", "b"), threePhases("mid", cd, &runs, "before-charge"))
	}()
	<-done
	e.exec(`UPDATE ` + e.schema + `.records SET key_derivation = 2, scope = 't' WHERE key = 'mid'`)
	e.expireLeases()
	if _, err := idem.Run(ctx, e.eng, payOp, request("t", "mid", "b"), threePhases("mid", cd, &runs, "")); err != nil {
		t.Fatal(err)
	}
	fp := request("t", "mid", "b").Fingerprint
	if want := idemadmin.DeriveKey(idemadmin.KeyDerivationV2, "createPayment", "t", "mid", "charge", fp, 64); cd.keys[1] != want {
		t.Fatalf("resumed version-2 record sent %s; want %s", cd.keys[1], want)
	}
	fp = request("t", "new", "b").Fingerprint
	if _, err := idem.Run(ctx, e.eng, payOp, request("t", "new", "b"), threePhases("new", cd, &runs, "")); err != nil {
		t.Fatal(err)
	}
	if want := idemadmin.DeriveKey(idemadmin.KeyDerivationV3, "createPayment", "t", "new", "charge", fp, 64); cd.keys[2] != want {
		t.Fatalf("new record sent %s; want version 3's %s", cd.keys[2], want)
	}
	if v2 := idemadmin.DeriveKey(idemadmin.KeyDerivationV2, "createPayment", "t", "new", "charge", fp, 64); cd.keys[2] == v2 {
		t.Fatalf("version 3 derives version 2's key")
	}
}

// TestAbandonedAndResolve: a half-done record past retention is reported
// stuck (Inspect, Abandoned, the EventStuck count after a prune) and is
// settled only by a deliberate Resolve.
func TestAbandonedAndResolve(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, k := range []string{"a", "b"} {
			halfDone(t, e, k, &card{charges: map[string]string{}}, new(int))
		}
		var stuck int64 = -1
		e.eng = mustEngine(t, e, idem.ObserverFunc(func(ev idem.Event) {
			if ev.Kind == idem.EventStuck {
				stuck = ev.Count
			}
		}))
		if _, err := idemadmin.Prune(ctx, e.eng, idemadmin.PruneOptions{Batch: 100}); err != nil || stuck != 2 {
			t.Fatalf("Prune: %v; stuck count %d, want 2", err, stuck)
		}
		list, err := idemadmin.Abandoned(ctx, e.eng, idemadmin.AbandonedQuery{StuckOnly: true, Limit: 10})
		if err != nil || len(list) != 2 || !list[0].Stuck || list[0].RecoveryPoint != "record" {
			t.Fatalf("Abandoned = %+v, %v", list, err)
		}
		if info, err := idemadmin.Inspect(ctx, e.eng, "createPayment", "t", "a"); err != nil || !info.Stuck {
			t.Fatalf("Inspect = %+v, %v; want stuck", info, err)
		}
		if err := idemadmin.Resolve(ctx, e.eng, "createPayment", "t", "a", idemadmin.Resolution{Status: 502, Detail: "card network confirmed: no charge"}); err != nil {
			t.Fatal(err)
		}
		out, err := idem.Run(ctx, e.eng, payOp, request("t", "a", "b"), twoPhases("a"))
		if err != nil || !out.Replayed || out.Response.Status != 502 || !strings.Contains(string(out.Response.Body), "no charge") {
			t.Fatalf("after resolving with a problem: %+v, %v", out, err)
		}
		if err := idemadmin.Resolve(ctx, e.eng, "createPayment", "t", "b", idemadmin.Resolution{Delete: true}); err != nil {
			t.Fatal(err)
		}
		for _, r := range []idemadmin.Resolution{{Delete: true}, {Status: 500}} {
			if err := idemadmin.Resolve(ctx, e.eng, "createPayment", "t", "a", r); !errors.Is(err, idemadmin.ErrNotAbandoned) {
				t.Fatalf("resolving a completed record (%+v): %v; want ErrNotAbandoned", r, err)
			}
		}
		// A claimed record whose owner's lease is live is not abandoned.
		halfDone(t, e, "live", &card{charges: map[string]string{}}, new(int))
		e.exec(`UPDATE ` + e.schema + `.records SET lease_until = now() + interval '1 hour' WHERE key = 'live'`)
		for _, r := range []idemadmin.Resolution{{Delete: true}, {Status: 500}} {
			if err := idemadmin.Resolve(ctx, e.eng, "createPayment", "t", "live", r); !errors.Is(err, idemadmin.ErrNotAbandoned) {
				t.Fatalf("resolving a live claim (%+v): %v; want ErrNotAbandoned", r, err)
			}
		}
		if err := idemadmin.Resolve(ctx, e.eng, "createPayment", "t", "none", idemadmin.Resolution{Delete: true}); !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("resolving a missing record: %v; want no rows", err)
		}
		if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records WHERE id = ` + e.schema + `.record_id('createPayment', 't', 'b')`); n != 0 {
			t.Fatal("the deleted record remains")
		}
	})
}

func mustEngine(t *testing.T, e *env, obs idem.Observer) *idem.Engine {
	t.Helper()
	eng, err := idem.New(e.pool, idem.Options{Schema: e.schema, Claim: e.mode.claim, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// TestRegisterValidatesPolicies: bad policies are refused when the service
// starts, each named.
func TestRegisterValidatesPolicies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good := &idem.Operation{ID: "good"}
	short := &idem.Operation{ID: "short", Policy: idem.Policy{Lease: 200 * time.Millisecond}}
	framing := &idem.Operation{ID: "framing", Policy: idem.Policy{ReplayHeaders: []string{"content-length"}}}
	err := e.eng.Register(good, short, framing)
	if err == nil || !strings.Contains(err.Error(), "short: lease 200ms is shorter than 1s") ||
		!strings.Contains(err.Error(), "framing: replay header content-length") {
		t.Fatalf("Register = %v; want both bad policies named", err)
	}
	if err := e.eng.Register(good); err != nil {
		t.Fatal(err)
	}
	if _, err := idem.New(e.pool, idem.Options{Schema: e.schema, DerivedKeyLength: 8}); err == nil {
		t.Fatal("New accepted a derived key length of 8")
	}
}

// TestResolveKeepsTheOperationsRetention: an operator's answer to an
// abandoned record, given without a retention of its own, is replayed for
// the operation's own retention (here 72 hours, as the payments example's
// webhook receiver keeps its records), not a default that may be shorter:
// a redelivery after a day must still get it.
func TestResolveKeepsTheOperationsRetention(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		op := &idem.Operation{ID: "webhook", Policy: idem.Policy{Lease: 30 * time.Second, Retention: 72 * time.Hour}}
		for _, key := range []string{"own", "given"} {
			// The claim commits first in every mode, so that the record
			// phase commits before the final phase dies.
			phases := committedFirst(twoPhases(key))
			phases[2].Final = func(context.Context, pgx.Tx, *payState) (*idem.Response, error) {
				runtime.Goexit() // dies after its first phase committed: abandoned
				return nil, nil
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				idem.Run(ctx, e.eng, op, request("t", key, "b"), phases)
			}()
			<-done
		}
		e.expireLeases()
		if err := idemadmin.Resolve(ctx, e.eng, "webhook", "t", "own", idemadmin.Resolution{Status: 409, Detail: "applied by hand"}); err != nil {
			t.Fatal(err)
		}
		if err := idemadmin.Resolve(ctx, e.eng, "webhook", "t", "given", idemadmin.Resolution{Status: 409, Retention: 2 * time.Hour}); err != nil {
			t.Fatal(err)
		}
		hours := func(key string) float64 {
			var h float64
			if err := e.pool.QueryRow(ctx, `SELECT extract(epoch FROM expires_at - now()) / 3600 FROM `+e.schema+`.records
WHERE id = `+e.schema+`.record_id('webhook', 't', $1)`, key).Scan(&h); err != nil {
				t.Fatal(err)
			}
			return h
		}
		if h := hours("own"); h < 71.9 {
			t.Errorf("the operator's answer is kept %.1f hours; want the operation's 72", h)
		}
		if h := hours("given"); h < 1.9 || h > 2.1 {
			t.Errorf("with a retention of 2h the answer is kept %.1f hours", h)
		}
	})
}

// TestCommitNeverMovesALeaseBack: a lease that stands later than a commit
// or a refresh would set it (as after the database's clock steps back:
// an NTP step, a VM resumed) stays where it is: neither the phase's commit
// (Advance) nor the keeper's refresh moves a live owner's lease into the
// past, where another request could take the key over. In every claim
// mode.
func TestCommitNeverMovesALeaseBack(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		op := &idem.Operation{ID: "clockStep", Policy: idem.Policy{Lease: time.Second}}
		ahead := func(tx pgx.Tx) (bool, error) {
			var ok bool
			err := tx.QueryRow(ctx, `SELECT lease_until > now() + interval '50 minutes' FROM `+e.schema+`.records WHERE key = 'step'`).Scan(&ok)
			return ok, err
		}
		var afterRefresh, afterCommit bool
		// The claim commits first in every mode, so that the phases run in
		// transactions of their own while another session moves the lease.
		phases := committedFirst([]idem.Phase[payState]{
			{Name: "push", Local: func(ctx context.Context, tx pgx.Tx, s *payState) error {
				// The lease an hour ahead, as a clock that stepped back sees it.
				if _, err := e.pool.Exec(ctx, `UPDATE `+e.schema+`.records SET lease_until = now() + interval '1 hour' WHERE key = 'step'`); err != nil {
					return err
				}
				time.Sleep(700 * time.Millisecond) // past a refresh, a third of the lease in
				var err error
				afterRefresh, err = func() (bool, error) {
					var ok bool
					err := e.pool.QueryRow(ctx, `SELECT lease_until > now() + interval '50 minutes' FROM `+e.schema+`.records WHERE key = 'step'`).Scan(&ok)
					return ok, err
				}()
				return err
			}},
			{Name: "check", Local: func(ctx context.Context, tx pgx.Tx, s *payState) (err error) {
				afterCommit, err = ahead(tx)
				return err
			}},
			{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
				return created("{}"), nil
			}},
		})
		if _, err := idem.Run(ctx, e.eng, op, request("t", "step", "b"), phases); err != nil {
			t.Fatal(err)
		}
		if !afterRefresh {
			t.Error("a refresh moved the lease back")
		}
		if !afterCommit {
			t.Error("the phase's commit moved the lease back")
		}
	})
}
