package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// inlineOp claims first, inline: the claim commits with the local
// phases up to the first foreign one.
var inlineOp = &idem.Operation{ID: "inline", Policy: idem.Policy{Lease: 30 * time.Second, Claim: idem.ClaimFirst}}

// TestInlineCrashLeavesNothing: an all-local execution that dies before its
// one commit leaves no record and no business row; the retry runs afresh.
func TestInlineCrashLeavesNothing(t *testing.T) {
	e := newEnv(t)
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
				if n := e.count(`SELECT count(*) FROM `+e.schema+`.records WHERE id = `+e.schema+`.record_id('inline', 't', $1)`, key); n != 0 {
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
			idem.Run(ctx, e.eng, inlineOp, request("t", key, "b"), phases)
		}()
		<-done
		if n := e.count(`SELECT count(*) FROM `+e.schema+`.records WHERE id = `+e.schema+`.record_id('inline', 't', $1)`, key); n != 0 {
			t.Fatalf("crash in phase %d left a record", crashIn)
		}
		if n := e.count(`SELECT count(*) FROM rows WHERE key = $1`, key); n != 0 {
			t.Fatalf("crash in phase %d left a business row", crashIn)
		}
		out, err := idem.Run(ctx, e.eng, inlineOp, request("t", key, "b"), twoPhases(key))
		if err != nil || out.Replayed || out.Resumed || out.Response.Status != 201 {
			t.Fatalf("retry after the crash: %+v, %v; want a fresh execution", out, err)
		}
	}
}

// holdOwner starts an inline execution of key whose first phase waits for
// release, and returns once it is inside that phase.
func holdOwner(t *testing.T, e *env, key string) (release func(), result <-chan *idem.Outcome) {
	t.Helper()
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
		o, err := idem.Run(context.Background(), e.eng, inlineOp, request("t", key, "b"), phases)
		if err != nil {
			t.Errorf("owner: %v", err)
		}
		out <- o
	}()
	<-in
	return func() { close(proceed) }, out
}

// TestInlineDuplicateWaitsThenReplays: a duplicate that arrives while the
// owner's claim is uncommitted waits on it and, once it commits, replays
// its answer.
func TestInlineDuplicateWaitsThenReplays(t *testing.T) {
	e := newEnv(t)
	release, owner := holdOwner(t, e, "k")
	dup := make(chan *idem.Outcome, 1)
	go func() {
		o, err := idem.Run(context.Background(), e.eng, inlineOp, request("t", "k", "b"), twoPhases("k"))
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
}

// TestInlineDuplicateWaitIsBounded: when the owner's claim stays
// uncommitted longer than ClaimWait, the duplicate answers 409 with
// Retry-After instead of waiting on.
func TestInlineDuplicateWaitIsBounded(t *testing.T) {
	e := newEnv(t)
	e.eng = mustEngineWith(t, e, idem.Options{Schema: e.schema, ClaimWait: 200 * time.Millisecond})
	release, owner := holdOwner(t, e, "k")
	_, err := idem.Run(context.Background(), e.eng, inlineOp, request("t", "k", "b"), twoPhases("k"))
	var perr *idem.Error
	if kindOf(err) != idemtype.KindInFlight || !errors.As(err, &perr) || perr.RetryAfter <= 0 {
		t.Fatalf("duplicate: %v; want 409 in-flight with Retry-After", err)
	}
	release()
	if o := <-owner; o == nil || o.Response.Status != 201 {
		t.Fatalf("owner: %+v", o)
	}
}

// TestInlineClaimIsBoundedByTheLease: an uncommitted claim cannot be taken
// over, so its transaction ends with the lease: a phase that runs longer is
// cancelled, its writes roll back and the key is free.
func TestInlineClaimIsBoundedByTheLease(t *testing.T) {
	e := newEnv(t)
	op := &idem.Operation{ID: "inlineShort", Policy: idem.Policy{Lease: time.Second, Claim: idem.ClaimFirst}}
	phases := twoPhases("slow")
	record := phases[0].Local
	phases[0].Local = func(ctx context.Context, tx pgx.Tx, s *payState) error {
		if err := record(ctx, tx, s); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_sleep(5)`)
		return err
	}
	_, err := idem.Run(context.Background(), e.eng, op, request("t", "slow", "b"), phases)
	var pgErr *pgconn.PgError
	cut := errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &pgErr) && pgErr.Code == "57014") // query_canceled
	if !cut {
		t.Fatalf("a phase longer than the lease: err %v; want it cancelled at the lease", err)
	}
	if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records`); n != 0 {
		t.Fatal("the cancelled claim left a record")
	}
	if n := e.count(`SELECT count(*) FROM rows`); n != 0 {
		t.Fatal("the cancelled phase's row was committed")
	}
}

func mustEngineWith(t *testing.T, e *env, opts idem.Options) *idem.Engine {
	t.Helper()
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
	e := newEnv(t)
	ctx := context.Background()
	first, err := idem.Run(ctx, e.eng, inlineOp, request("t", "k", "b"), twoPhases("k"))
	if err != nil {
		t.Fatal(err)
	}
	cold := mustEngineWith(t, e, idem.Options{Schema: e.schema})
	if out, err := idem.Run(ctx, cold, inlineOp, request("t", "k", "b"), twoPhases("k")); err != nil || !out.Replayed {
		t.Fatalf("cold replay: %+v, %v", out, err)
	}
	// Both engines now hold the answer; the store no longer does.
	e.exec(`DELETE FROM ` + e.schema + `.records`)
	for _, eng := range []*idem.Engine{e.eng, cold} {
		out, err := idem.Run(ctx, eng, inlineOp, request("t", "k", "b"), twoPhases("k"))
		if err != nil || !out.Replayed || !sameResponse(out.Response, first.Response) {
			t.Fatalf("cached replay: %+v, %v", out, err)
		}
		if _, err := idem.Run(ctx, eng, inlineOp, request("t", "k", "other body"), twoPhases("k")); kindOf(err) != idemtype.KindMismatch {
			t.Fatalf("cached record, other body: %v; want 422", err)
		}
	}
	if n := e.count(`SELECT count(*) FROM rows`); n != 1 {
		t.Fatalf("%d business rows; want 1", n)
	}
}
