package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestCrashBeforeCommitLeavesNothing: an execution whose phases run in the
// claim's own transaction and that dies before its one commit leaves no
// record and no business row; the retry runs afresh.
func TestCrashBeforeCommitLeavesNothing(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, crashIn := range []int{0, 1} {
			key := fmt.Sprintf("crash-%d", crashIn)
			phases := twoPhases(key)
			if crashIn == 0 {
				record := phases[0].Local
				phases[0].Local = func(ctx context.Context, tx pgx.Tx, s *payState) error {
					if err := record(ctx, tx, s); err != nil {
						return err
					}
					// The claim is not visible outside its transaction.
					if n := e.count(`SELECT count(*) FROM `+e.schema+`.records WHERE id = `+e.schema+`.record_id('createPayment', 't', $1)`, key); n != 0 {
						t.Errorf("an uncommitted claim is visible")
					}
					runtime.Goexit()
					return nil
				}
			} else {
				phases[1].Final = func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
					runtime.Goexit()
					return nil, nil
				}
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				idem.Run(ctx, e.eng, payOp, request("t", key, "b"), phases)
			}()
			<-done
			if n := e.count(`SELECT count(*) FROM `+e.schema+`.records WHERE id = `+e.schema+`.record_id('createPayment', 't', $1)`, key); n != 0 {
				t.Fatalf("crash in phase %d left a record", crashIn)
			}
			if n := e.count(`SELECT count(*) FROM rows WHERE key = $1`, key); n != 0 {
				t.Fatalf("crash in phase %d left a business row", crashIn)
			}
			out, err := idem.Run(ctx, e.eng, payOp, request("t", key, "b"), twoPhases(key))
			if err != nil || out.Replayed || out.Resumed || out.Response.Status != 201 {
				t.Fatalf("retry after the crash: %+v, %v; want a fresh execution", out, err)
			}
		}
	}, notIn{idem.ClaimSeparate, "the claim commits before the first phase: a crash leaves the claimed record, which TestCrashAtEveryRecoveryPoint resumes"})
}

// holdOwner starts an execution of payOp for key on an engine of e's
// schema that claims first, whose first phase waits for release, and
// returns once it is inside that phase: its claim is uncommitted until
// then.
func holdOwner(t *testing.T, e *env, key string) (release func(), result <-chan *idem.Outcome) {
	t.Helper()
	first := mustEngineWith(t, e, idem.Options{Claim: idem.ClaimFirst})
	in, proceed := make(chan struct{}), make(chan struct{})
	out := make(chan *idem.Outcome, 1)
	phases := twoPhases(key)
	record := phases[0].Local
	phases[0].Local = func(ctx context.Context, tx pgx.Tx, s *payState) error {
		close(in)
		<-proceed
		return record(ctx, tx, s)
	}
	go func() {
		o, err := idem.Run(context.Background(), first, payOp, request("t", key, "b"), phases)
		if err != nil {
			t.Errorf("owner: %v", err)
		}
		out <- o
	}()
	<-in
	return func() { close(proceed) }, out
}

// TestDuplicateWaitsThenReplays: a duplicate that arrives while the
// owner's claim is uncommitted waits on it (a separate or first claim on
// the claim's row lock; a last one, after running its phases, on the
// record's insert) and, once it commits, replays its answer.
func TestDuplicateWaitsThenReplays(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		release, owner := holdOwner(t, e, "k")
		dup := make(chan *idem.Outcome, 1)
		go func() {
			o, err := idem.Run(context.Background(), e.eng, payOp, request("t", "k", "b"), twoPhases("k"))
			if err != nil {
				t.Errorf("duplicate: %v", err)
			}
			dup <- o
		}()
		time.Sleep(300 * time.Millisecond) // the duplicate is now waiting on the claim's row lock
		release()
		first, again := <-owner, <-dup
		if first == nil || again == nil || !again.Replayed || !bytes.Equal(first.Response.Body, again.Response.Body) {
			t.Fatalf("owner %+v, duplicate %+v; want the duplicate to replay the owner's answer", first, again)
		}
		if n := e.count(`SELECT count(*) FROM rows WHERE key = 'k'`); n != 1 {
			t.Fatalf("%d business rows", n)
		}
	})
}

// TestDuplicateWaitIsBounded: when the owner's claim stays uncommitted
// longer than the duplicate's wait (here its client's Prefer: wait, past
// a ClaimWait shorter still), the duplicate answers 409 with Retry-After
// instead of waiting on, and leaves nothing behind.
func TestDuplicateWaitIsBounded(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		e.eng = mustEngineWith(t, e, idem.Options{ClaimWait: 200 * time.Millisecond})
		release, owner := holdOwner(t, e, "k")
		res := make(chan error, 1)
		go func() {
			// The client waits at most 300 ms (Prefer: wait=N, which the
			// protocol takes in whole seconds; the engine in any duration).
			req := request("t", "k", "b")
			req.Wait, req.WaitSent = 300*time.Millisecond, true
			_, err := idem.Run(context.Background(), e.eng, payOp, req, twoPhases("k"))
			res <- err
		}()
		var err error
		select {
		case err = <-res:
		case <-time.After(10 * time.Second):
			release()
			t.Fatal("the duplicate still waits on the uncommitted claim after 10s; want 409 once its wait is spent")
		}
		var perr *idem.Error
		if kindOf(err) != idemtype.KindInFlight || !errors.As(err, &perr) || perr.RetryAfter <= 0 {
			t.Fatalf("duplicate: %v; want 409 in-flight with Retry-After", err)
		}
		release()
		if o := <-owner; o == nil || o.Response.Status != 201 {
			t.Fatalf("owner: %+v", o)
		}
		if n := e.count(`SELECT count(*) FROM rows WHERE key = 'k'`); n != 1 {
			t.Fatalf("%d business rows; want the owner's only", n)
		}
	})
}

// TestNoWaitIsAnsweredBeforeAnUncommittedClaimCommits: a client that will
// not wait (Prefer: wait=0) for a key an uncommitted claim holds is
// answered 409 without waiting on the claim's lock, however long the
// claim wait (here a minute): the owner is released only once that answer
// came, so a request that waited on the lock would replay instead.
func TestNoWaitIsAnsweredBeforeAnUncommittedClaimCommits(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		release, owner := holdOwner(t, e, "k")
		patient := mustEngineWith(t, e, idem.Options{ClaimWait: time.Minute})
		res := make(chan error, 1)
		go func() {
			_, err := idem.Run(context.Background(), patient, payOp, noWait(request("t", "k", "b")), twoPhases("k"))
			res <- err
		}()
		var err error
		select {
		case err = <-res:
			release()
		case <-time.After(10 * time.Second):
			release()
			err = <-res
		}
		var perr *idem.Error
		if kindOf(err) != idemtype.KindInFlight || !errors.As(err, &perr) || perr.RetryAfter <= 0 {
			t.Fatalf("Prefer: wait=0 behind an uncommitted claim: %v; want 409 in-flight with Retry-After before the claim commits", err)
		}
		if o := <-owner; o == nil || o.Response.Status != 201 {
			t.Fatalf("owner: %+v", o)
		}
	})
}

// TestClaimIsBoundedByTheLease: an uncommitted claim cannot be taken over,
// so the transaction the phases run in with it ends with the lease: a phase
// that runs longer (a slow statement, a wait on a lock) is cancelled, its
// writes roll back and the key is free.
func TestClaimIsBoundedByTheLease(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		op := &idem.Operation{ID: "short", Policy: idem.Policy{Lease: time.Second, Retention: time.Hour}}
		// Cut at the lease: by the context's deadline, by statement_timeout
		// (query_canceled), or by pgx closing the connection when the
		// deadline interrupts a round trip.
		cut := func(err error) bool {
			var pgErr *pgconn.PgError
			return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &pgErr) && pgErr.Code == "57014") ||
				err != nil && strings.Contains(err.Error(), "conn closed")
		}
		t.Run("slow statement", func(t *testing.T) {
			phases := twoPhases("slow")
			record := phases[0].Local
			phases[0].Local = func(ctx context.Context, tx pgx.Tx, s *payState) error {
				if err := record(ctx, tx, s); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `SELECT pg_sleep(5)`)
				return err
			}
			if _, err := idem.Run(ctx, e.eng, op, request("t", "slow", "b"), phases); !cut(err) {
				t.Fatalf("a phase longer than the lease: err %v; want it cancelled at the lease", err)
			}
		})
		t.Run("a lock held past the lease", func(t *testing.T) {
			e.exec(`INSERT INTO rows (key) VALUES ('held')`)
			blocker, err := e.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Rollback(context.Background())
			if _, err := blocker.Exec(ctx, `SELECT * FROM rows WHERE key = 'held' FOR UPDATE`); err != nil {
				t.Fatal(err)
			}
			_, err = idem.Run(ctx, e.eng, op, request("t", "k", "b"), []idem.Phase[payState]{{Name: "only",
				Final: func(ctx context.Context, tx pgx.Tx, _ *payState) (*idem.Response, error) {
					if _, err := tx.Exec(ctx, `UPDATE rows SET note = 'updated' WHERE key = $1`, "held"); err != nil {
						return nil, err
					}
					return created(`{}`), nil
				}}})
			if !cut(err) {
				t.Fatalf("the execution outlived its lease: %v; want it cancelled at the lease", err)
			}
			blocker.Rollback(context.Background())
			if n := e.count(`SELECT count(*) FROM rows WHERE note = 'updated'`); n != 0 {
				t.Fatal("the bounded execution's update committed")
			}
		})
		if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records`); n != 0 {
			t.Fatal("a cancelled claim left a record")
		}
		if n := e.count(`SELECT count(*) FROM rows WHERE key = 'slow'`); n != 0 {
			t.Fatal("the cancelled phase's row was committed")
		}
		for _, key := range []string{"slow", "k"} {
			if out, err := idem.Run(ctx, e.eng, op, request("t", key, "b"), twoPhases(key)); err != nil || out.Replayed {
				t.Fatalf("retry of %s: %+v, %v; want a fresh execution", key, out, err)
			}
		}
	}, notIn{idem.ClaimSeparate, "the claim commits before the phases, which the keeper's refreshes let run past the lease (TestCommitNeverShortensLease)"})
}

// mustEngineWith is an engine of e's schema and claim mode, built from opts.
func mustEngineWith(t *testing.T, e *env, opts idem.Options) *idem.Engine {
	t.Helper()
	opts.Schema = e.schema
	if opts.Claim == idem.ClaimAuto {
		opts.Claim = e.mode.claim
	}
	eng, err := idem.New(e.pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// TestReplayCache: a replay of a completed key is answered from memory
// (the record may even be gone from the store), still checked against the
// fingerprint; a cold engine reads the record once and then caches it.
func TestReplayCache(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		first, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), twoPhases("k"))
		if err != nil {
			t.Fatal(err)
		}
		cold := mustEngineWith(t, e, idem.Options{})
		if out, err := idem.Run(ctx, cold, payOp, request("t", "k", "b"), twoPhases("k")); err != nil || !out.Replayed {
			t.Fatalf("cold replay: %+v, %v", out, err)
		}
		// Both engines now hold the answer; the store no longer does.
		e.exec(`DELETE FROM ` + e.schema + `.records`)
		for _, eng := range []*idem.Engine{e.eng, cold} {
			out, err := idem.Run(ctx, eng, payOp, request("t", "k", "b"), twoPhases("k"))
			if err != nil || !out.Replayed || !sameResponse(out.Response, first.Response) {
				t.Fatalf("cached replay: %+v, %v", out, err)
			}
			if _, err := idem.Run(ctx, eng, payOp, request("t", "k", "other body"), twoPhases("k")); kindOf(err) != idemtype.KindMismatch {
				t.Fatalf("cached record, other body: %v; want 422", err)
			}
		}
		if n := e.count(`SELECT count(*) FROM rows`); n != 1 {
			t.Fatalf("%d business rows; want 1", n)
		}
	})
}
