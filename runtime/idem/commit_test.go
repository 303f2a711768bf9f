package idem_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// fatalAfterCommit is a fault on the connections of a pool: when armed,
// the first COMMIT whose CommandComplete the server sends is delivered, and
// then, before ReadyForQuery, a FATAL (as a fast shutdown, a
// pg_terminate_backend or a failover sends it) and the end of the
// connection. The COMMIT took effect. The first skip COMMITs pass.
type fatalAfterCommit struct {
	armed atomic.Bool
	skip  atomic.Int32
}

func (f *fatalAfterCommit) dial(dial pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &faultConn{Conn: c, f: f}, nil
	}
}

// faultConn reads the server's messages whole, to find CommandComplete
// "COMMIT" among them.
type faultConn struct {
	net.Conn
	f       *fatalAfterCommit
	in, out []byte
	buf     [4096]byte
	dead    bool
}

func errorResponse(severity, code, msg string) []byte {
	var body []byte
	for _, f := range [][2]string{{"S", severity}, {"V", severity}, {"C", code}, {"M", msg}} {
		body = append(append(append(body, f[0]...), f[1]...), 0)
	}
	body = append(body, 0)
	m := []byte{'E', 0, 0, 0, 0}
	binary.BigEndian.PutUint32(m[1:], uint32(4+len(body)))
	return append(m, body...)
}

func (c *faultConn) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		if c.dead {
			return 0, io.EOF
		}
		n, err := c.Conn.Read(c.buf[:])
		c.in = append(c.in, c.buf[:n]...)
		for len(c.in) >= 5 {
			end := 1 + int(binary.BigEndian.Uint32(c.in[1:5]))
			if len(c.in) < end {
				break
			}
			msg := c.in[:end]
			c.out = append(c.out, msg...)
			c.in = c.in[end:]
			if msg[0] == 'C' && bytes.HasPrefix(msg[5:], []byte("COMMIT\x00")) && c.f.armed.Load() && c.f.skip.Add(-1) < 0 &&
				c.f.armed.CompareAndSwap(true, false) {
				c.out = append(c.out, errorResponse("FATAL", "57P01", "terminating connection due to administrator command")...)
				c.dead = true
				c.Conn.Close()
				break
			}
		}
		if err != nil && len(c.out) == 0 {
			return 0, err
		}
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// poolWithRows is a pool configured by configure, with the engine's tables
// and newEnv's business table "rows" in its schema.
func poolWithRows(t *testing.T, configure func(*pgxpool.Config)) (*pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	pool, schema := dbtest.PoolWith(t, configure)
	dbtest.Migrate(t, pool, schema)
	if _, err := pool.Exec(ctx, `CREATE TABLE rows (key text NOT NULL, note text NOT NULL DEFAULT '')`); err != nil {
		t.Fatal(err)
	}
	return pool, schema
}

// TestFatalAfterCommitIsUnknown: a FATAL that arrives after COMMIT's
// CommandComplete and before ReadyForQuery leaves the commit's outcome
// unknown (here it took effect). In every claim mode the engine answers
// 503 with Retry-After, releases nothing, says the error is not safe to
// retry blindly, and the retry replays what was committed.
func TestFatalAfterCommitIsUnknown(t *testing.T) {
	t.Parallel()
	for _, cm := range claimModes {
		t.Run(string(cm), func(t *testing.T) {
			ctx := context.Background()
			fault := &fatalAfterCommit{}
			pool, schema := poolWithRows(t, func(cfg *pgxpool.Config) {
				cfg.ConnConfig.DialFunc = fault.dial(cfg.ConnConfig.DialFunc)
			})
			ev := &events{n: map[idem.EventKind]int{}}
			eng, err := idem.New(pool, idem.Options{Schema: schema, Observer: ev, ReplayCacheBytes: -1})
			if err != nil {
				t.Fatal(err)
			}
			op := &idem.Operation{ID: "fatal", Policy: idem.Policy{Lease: 30 * time.Second, Claim: cm}}
			phases := []idem.Phase[payState]{{Name: "only", Final: func(ctx context.Context, tx pgx.Tx, _ *payState) (*idem.Response, error) {
				if _, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ($1)`, "k"); err != nil {
					return nil, err
				}
				return created(`{"n":1}`), nil
			}}}
			if dbtest.Citus() && cm == idem.ClaimSeparate {
				// There the claim commits in a transaction of its own, to
				// set the claim wait on the worker: the phase's COMMIT is
				// the second.
				fault.skip.Store(1)
			}
			fault.armed.Store(true)
			_, err = idem.Run(ctx, eng, op, request("t", "k", "b"), phases)
			var ie *idem.Error
			if !errors.As(err, &ie) || ie.Kind != idemtype.KindUnavailable || ie.RetryAfter <= 0 {
				t.Fatalf("err %v; want unavailable (503) with Retry-After", err)
			}
			if pgconn.SafeToRetry(err) {
				t.Errorf("SafeToRetry(%v) is true after COMMIT was sent", err)
			}
			if n := ev.count(idem.EventRelease); n != 0 {
				t.Errorf("%d release(s) observed for a commit that took effect", n)
			}
			out, err := idem.Run(ctx, eng, op, request("t", "k", "b"), phases)
			if err != nil || !out.Replayed || string(out.Response.Body) != `{"n":1}` {
				t.Fatalf("retry: %+v, %v; want the committed answer replayed", out, err)
			}
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM rows`).Scan(&n); err != nil || n != 1 {
				t.Fatalf("%d business rows (%v); want 1", n, err)
			}
		})
	}
}

// TestStatementsRecover: after a column that the engine's read returns
// changes type under a running service ("cached plan must not change
// result type"), and after DEALLOCATE ALL drops every prepared statement
// ("prepared statement does not exist"), the next request succeeds, in
// every claim mode, on the one connection that has the engine's
// statements prepared.
func TestStatementsRecover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := poolWithRows(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
	eng, err := idem.New(pool, idem.Options{Schema: schema, ReplayCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	ops := map[idem.ClaimMode]*idem.Operation{}
	for _, cm := range claimModes {
		ops[cm] = &idem.Operation{ID: "recover-" + string(cm), Policy: idem.Policy{Lease: 30 * time.Second, Claim: cm}}
	}
	round := func(when string) {
		t.Helper()
		for _, cm := range claimModes {
			for _, key := range []string{"old", when} { // a replay, and a new key
				out, err := idem.Run(ctx, eng, ops[cm], request("t", key, "b"), twoPhases(key))
				if err != nil || out.Response.Status != 201 || out.Replayed != (key == "old") {
					t.Fatalf("%s, %s, key %s: %+v, %v", when, cm, key, out, err)
				}
			}
		}
	}
	for _, cm := range claimModes {
		if _, err := idem.Run(ctx, eng, ops[cm], request("t", "old", "b"), twoPhases("old")); err != nil {
			t.Fatal(err)
		}
	}
	round("before")
	if _, err := pool.Exec(ctx, `ALTER TABLE records ALTER COLUMN response_status TYPE integer`); err != nil {
		t.Fatal(err)
	}
	round("after ALTER TABLE")
	if _, err := pool.Exec(ctx, `DEALLOCATE ALL`); err != nil {
		t.Fatal(err)
	}
	round("after DEALLOCATE ALL")
}

// TestReplayCacheStalenessIsBounded: two engines on one database. After an
// operator deletes a completed record, the other engine executes the key
// afresh; the engine that had cached the old answer replays it for at most
// ReplayCacheTTL, and then the answer in the store.
func TestReplayCacheStalenessIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	const ttl = 200 * time.Millisecond
	a := mustEngineWith(t, e, idem.Options{Schema: e.schema, ReplayCacheTTL: ttl})
	b := mustEngineWith(t, e, idem.Options{Schema: e.schema, ReplayCacheTTL: ttl})
	var runs atomic.Int64
	phases := func() []idem.Phase[payState] {
		return []idem.Phase[payState]{{Name: "only", Final: func(ctx context.Context, tx pgx.Tx, _ *payState) (*idem.Response, error) {
			return created(fmt.Sprintf(`{"run":%d}`, runs.Add(1))), nil
		}}}
	}
	first, err := idem.Run(ctx, a, lastOp, request("t", "k", "b"), phases())
	if err != nil {
		t.Fatal(err)
	}
	e.exec(`DELETE FROM ` + e.schema + `.records`) // as docs/operations.md tells operators
	second, err := idem.Run(ctx, b, lastOp, request("t", "k", "b"), phases())
	if err != nil || second.Replayed || string(second.Response.Body) == string(first.Response.Body) {
		t.Fatalf("the other engine after the removal: %+v, %v; want a fresh execution", second, err)
	}
	time.Sleep(2 * ttl)
	again, err := idem.Run(ctx, a, lastOp, request("t", "k", "b"), phases())
	if err != nil || !again.Replayed || string(again.Response.Body) != string(second.Response.Body) {
		t.Fatalf("the first engine past the TTL: %+v, %v; want the stored %s", again, err, second.Response.Body)
	}
}

// TestClaimWaitUnderAMillisecond: a ClaimWait under a millisecond still
// bounds the wait (lock_timeout '0' would be no limit at all): a duplicate
// of an execution whose claim is uncommitted gets 409.
func TestClaimWaitUnderAMillisecond(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	eng := mustEngineWith(t, e, idem.Options{Schema: e.schema, ClaimWait: 300 * time.Microsecond})
	op := &idem.Operation{ID: "wait", Policy: idem.Policy{Lease: 30 * time.Second, Claim: idem.ClaimFirst}}
	started, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		phases := twoPhases("k")
		record := phases[0].Local
		phases[0].Local = func(ctx context.Context, tx pgx.Tx, s *payState) error {
			close(started)
			<-release
			return record(ctx, tx, s)
		}
		idem.Run(context.Background(), eng, op, request("t", "k", "b"), phases)
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	_, err := idem.Run(ctx, eng, op, noWait(request("t", "k", "b")), twoPhases("k"))
	cancel()
	close(release)
	wg.Wait()
	if kindOf(err) != idemtype.KindInFlight {
		t.Fatalf("the duplicate: %v; want in flight (409)", err)
	}
}

// TestCompleterShutdownLetsPhasesEnd: stopping the background completer
// (cancelling RunCompleter's context) does not cancel the phase it is
// running: the phase ends and the record completes.
func TestCompleterShutdownLetsPhasesEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	op := &idem.Operation{ID: "bgstop", Policy: idem.Policy{Lease: 30 * time.Second, Complete: idemtype.CompleteBackground}}
	cd := &card{charges: map[string]string{}}
	runs := 0
	started, proceed := make(chan struct{}), make(chan struct{})
	idem.RegisterCompleter(e.eng, op, func(payload []byte) ([]idem.Phase[payState], error) {
		phases := threePhases("k", cd, &runs, "")
		finish := phases[2].Final
		phases[2].Final = func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
			close(started)
			<-proceed
			return finish(ctx, tx, s)
		}
		return phases, nil
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		idem.Run(ctx, e.eng, op, request("t", "k", "k"), threePhases("k", cd, &runs, "after-charge"))
	}()
	<-done
	e.expireLeases()
	cctx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		e.eng.RunCompleter(cctx, time.Hour)
	}()
	<-started
	stop()
	close(proceed)
	<-stopped
	out, err := idem.Run(ctx, e.eng, op, request("t", "k", "k"), threePhases("k", cd, &runs, ""))
	if err != nil || !out.Replayed || out.Response.Status != 201 {
		t.Fatalf("after the completer stopped: %+v, %v; want the completed answer", out, err)
	}
}

// TestCompleterStaleCommitKeepsTheRecord: the background completer's
// commit meets a stale statement (DEALLOCATE ALL under it). Nothing
// committed, but the record is not released, as a request's execution would
// release it before deciding the key again: the completer does not decide
// again, and a released record would lose the stored request. The next pass
// completes it.
func TestCompleterStaleCommitKeepsTheRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := poolWithRows(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
	eng, err := idem.New(pool, idem.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	op := &idem.Operation{ID: "bgstale", Policy: idem.Policy{Lease: 30 * time.Second, Complete: idemtype.CompleteBackground, Claim: idem.ClaimSeparate}}
	idem.RegisterCompleter(eng, op, func(payload []byte) ([]idem.Phase[payState], error) {
		// The phase's own statement is new to the connection: only the
		// engine's statements are stale.
		phases := twoPhases(string(payload))
		phases[0].Local = func(ctx context.Context, tx pgx.Tx, s *payState) error {
			_, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ($1) -- by the completer`, string(payload))
			return err
		}
		return phases, nil
	})
	// Every statement of the path prepared on the one connection.
	if _, err := idem.Run(ctx, eng, op, request("t", "warm", "warm"), twoPhases("warm")); err != nil {
		t.Fatal(err)
	}
	phases := twoPhases("k")
	phases[0].Local = func(context.Context, pgx.Tx, *payState) error { runtime.Goexit(); return nil }
	done := make(chan struct{})
	go func() {
		defer close(done)
		idem.Run(ctx, eng, op, request("t", "k", "k"), phases)
	}()
	<-done
	if _, err := pool.Exec(ctx, `UPDATE records SET lease_until = now() - interval '1 second' WHERE owner_token IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DEALLOCATE ALL`); err != nil {
		t.Fatal(err)
	}
	completed := 0
	for range 4 { // passes that meet stale statements fail; none may lose the record
		n, _ := idemadmin.CompleteAbandoned(ctx, eng, 10)
		completed += n
		if _, err := pool.Exec(ctx, `UPDATE records SET lease_until = now() - interval '1 second' WHERE owner_token IS NOT NULL`); err != nil {
			t.Fatal(err)
		}
	}
	out, err := idem.Run(ctx, eng, op, request("t", "k", "k"), twoPhases("k"))
	if err != nil || completed != 1 || !out.Replayed {
		t.Fatalf("completed %d; then %+v, %v; want the completer's answer replayed", completed, out, err)
	}
}

// TestCommitThatCannotBeSentReleases: a final response whose status the
// record cannot hold fails before anything of the commit is sent (pgx
// cannot encode it), in cache_statement mode; or the server refuses it, in
// the modes where pgx does not ask for types. Either way nothing committed:
// the key is released, never left ambiguous as if COMMIT had gone out.
func TestCommitThatCannotBeSentReleases(t *testing.T) {
	t.Parallel()
	for _, mode := range poolerModes() {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			pool, schema := poolWithRows(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.DefaultQueryExecMode = mode })
			ev := &events{n: map[idem.EventKind]int{}}
			eng, err := idem.New(pool, idem.Options{Schema: schema, Observer: ev})
			if err != nil {
				t.Fatal(err)
			}
			for _, cm := range claimModes {
				op := &idem.Operation{ID: "status-" + string(cm), Policy: idem.Policy{Lease: 30 * time.Second, Claim: cm}}
				_, err := idem.Run(ctx, eng, op, request("t", "k", "b"), []idem.Phase[payState]{{Name: "only",
					Final: func(context.Context, pgx.Tx, *payState) (*idem.Response, error) {
						return &idem.Response{Status: 70000}, nil
					}}})
				if err == nil || kindOf(err) == idemtype.KindUnavailable {
					t.Errorf("%s: %v; want the refusal, not an unknown outcome", cm, err)
				}
			}
			if n := ev.count(idem.EventAmbiguous); n != 0 {
				t.Errorf("%d ambiguous outcomes; want none", n)
			}
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM records`).Scan(&n); err != nil || n != 0 {
				t.Errorf("%d records remain (%v); want none", n, err)
			}
		})
	}
}
