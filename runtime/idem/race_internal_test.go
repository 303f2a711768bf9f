package idem

// Races between an owner and a retry, driven deterministically through the
// engine's test hooks.

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idemtype"
	"github.com/idemgen/idemgen/runtime/internal/adminlink"
)

type raceEnv struct {
	t      *testing.T
	pool   *pgxpool.Pool
	schema string
	eng    *Engine
	mu     sync.Mutex
	events map[EventKind]int
}

func newRaceEnv(t *testing.T) *raceEnv {
	t.Helper()
	pool, schema := dbtest.Pool(t)
	dbtest.Migrate(t, pool, schema)
	r := &raceEnv{t: t, pool: pool, schema: schema, events: map[EventKind]int{}}
	eng, err := New(pool, Options{Schema: schema, Observer: ObserverFunc(func(ev Event) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.events[ev.Kind]++
	})})
	if err != nil {
		t.Fatal(err)
	}
	r.eng = eng
	return r
}

func (r *raceEnv) count(k EventKind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events[k]
}

func (r *raceEnv) exec(sql string, args ...any) {
	r.t.Helper()
	if _, err := r.pool.Exec(context.Background(), sql, args...); err != nil {
		r.t.Fatal(err)
	}
}

func raceReq(key string) KeyedRequest {
	fp := sha256.Sum256([]byte("body"))
	return KeyedRequest{Scope: "s", Key: key, Fingerprint: fp[:]}
}

// noWaitReq is raceReq from a client that will not wait for an execution
// in flight (Prefer: wait=0): 409 at once.
func noWaitReq(key string) KeyedRequest {
	req := raceReq(key)
	req.WaitSent = true
	return req
}

func errKind(err error) idemtype.ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}

type st struct{ N int }

func local(name string) Phase[st] {
	return Phase[st]{Name: name, Local: func(ctx context.Context, tx pgx.Tx, s *st) error { s.N++; return nil }}
}

func final() Phase[st] {
	return Phase[st]{Name: "final", Final: func(ctx context.Context, tx pgx.Tx, s *st) (*Response, error) {
		return &Response{Status: 201, Body: []byte("{}")}, nil
	}}
}

// TestKeeperStopsBeforeTheEnd: the lease keeper stops before the engine
// releases, yields or completes, so no refresh lands after the end: a
// yielded claim is resumable at once and no fenced event is reported.
func TestKeeperStopsBeforeTheEnd(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	op := &Operation{ID: "op", Policy: Policy{Lease: lease}}
	// After the outcome, wait longer than one refresh interval: a keeper
	// still running refreshes (or is fenced) in that time.
	linger := func() { time.Sleep(lease/3 + 300*time.Millisecond) }
	ctx := context.Background()

	t.Run("yield", func(t *testing.T) {
		r := newRaceEnv(t)
		r.eng.hooks.afterEnd = linger
		_, err := Run(ctx, r.eng, op, raceReq("k"), []Phase[st]{local("one"),
			{Name: "two", Foreign: func(ctx context.Context, key string, s *st) error { return errors.New("timeout") }}, final()})
		if errKind(err) != idemtype.KindFailed {
			t.Fatalf("err %v; want failed", err)
		}
		r.eng.hooks.afterEnd = nil
		out, err := Run(ctx, r.eng, op, raceReq("k"), []Phase[st]{local("one"),
			{Name: "two", Foreign: func(ctx context.Context, key string, s *st) error { return nil }}, final()})
		if err != nil || !out.Resumed {
			t.Fatalf("retry right after the yield: %+v, %v; want it resumed at once", out, err)
		}
		if n := r.count(EventFenced); n != 0 {
			t.Fatalf("%d spurious fenced events", n)
		}
	})
	t.Run("release", func(t *testing.T) {
		r := newRaceEnv(t)
		r.eng.hooks.afterEnd = linger
		_, err := Run(ctx, r.eng, op, raceReq("k"), []Phase[st]{{Name: "only", Final: func(ctx context.Context, tx pgx.Tx, s *st) (*Response, error) {
			return nil, Release(errors.New("bad input"))
		}}})
		if err == nil {
			t.Fatal("want the release error")
		}
		if n := r.count(EventFenced); n != 0 {
			t.Fatalf("%d spurious fenced events after a release", n)
		}
	})
	t.Run("complete", func(t *testing.T) {
		r := newRaceEnv(t)
		r.eng.hooks.afterEnd = linger
		if _, err := Run(ctx, r.eng, op, raceReq("k"), []Phase[st]{local("one"), final()}); err != nil {
			t.Fatal(err)
		}
		if n := r.count(EventFenced); n != 0 {
			t.Fatalf("%d spurious fenced events after completion", n)
		}
	})
}

// claimedAndExpired inserts a record claimed by another owner at recovery
// point rp, whose lease has expired, optionally past its retention.
func (r *raceEnv) claimedAndExpired(key, rp string, pastRetention bool) {
	r.t.Helper()
	expires := "now() + interval '1 hour'"
	if pastRetention {
		expires = "now() - interval '1 second'"
	}
	fp := raceReq(key).Fingerprint
	r.exec(`INSERT INTO `+r.schema+`.records (id, namespace, scope, key, operation, fingerprint, owner_token,
    lease_until, recovery_point, expires_at)
VALUES (`+r.schema+`.record_id('op', 's', $1), 'op', 's', $1, 'op', $2, gen_random_uuid(), now() - interval '1 second', $3, `+expires+`)`, key, fp, rp)
}

// ownerRefreshes is what a slow but live owner's lease refresh does.
func (r *raceEnv) ownerRefreshes(key string) func() {
	return func() {
		r.eng.hooks.afterRead = nil
		r.exec(`UPDATE `+r.schema+`.records SET lease_until = now() + interval '1 minute' WHERE key = $1`, key)
	}
}

// TestTakeoverRechecksLease: the retry read an expired lease, then the owner
// refreshed it before the takeover: the takeover must not happen (409).
func TestTakeoverRechecksLease(t *testing.T) {
	dbtest.NotPlaced(t, "its records are written by hand, with no placement (the statements it tests are the same in both layouts, or pinned by the id layout's)")
	t.Parallel()
	r := newRaceEnv(t)
	op := &Operation{ID: "op", Policy: Policy{Lease: 30 * time.Second}}
	r.claimedAndExpired("k", "one", false)
	r.eng.hooks.afterRead = r.ownerRefreshes("k")
	out, err := Run(context.Background(), r.eng, op, noWaitReq("k"), []Phase[st]{local("one"), final()})
	if errKind(err) != idemtype.KindInFlight {
		t.Fatalf("retry: %+v, %v; want 409: the owner refreshed its lease before the takeover", out, err)
	}
	if n := r.count(EventTakeover); n != 0 {
		t.Fatalf("%d takeovers of a refreshed lease", n)
	}
}

// TestExpiredDeleteRechecksLiveness: the retry read a record past retention
// whose lease had expired, then the owner refreshed it before the delete:
// the record must stay (409), not be freed under its live owner.
func TestExpiredDeleteRechecksLiveness(t *testing.T) {
	dbtest.NotPlaced(t, "its records are written by hand, with no placement (the statements it tests are the same in both layouts, or pinned by the id layout's)")
	t.Parallel()
	r := newRaceEnv(t)
	op := &Operation{ID: "op", Policy: Policy{Lease: 30 * time.Second}}
	r.claimedAndExpired("k", "", true)
	r.eng.hooks.afterRead = r.ownerRefreshes("k")
	out, err := Run(context.Background(), r.eng, op, noWaitReq("k"), []Phase[st]{local("one"), final()})
	if errKind(err) != idemtype.KindInFlight {
		t.Fatalf("retry: %+v, %v; want 409: the owner is live again", out, err)
	}
	var n int
	if err := r.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+r.schema+`.records WHERE owner_token IS NOT NULL`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the live owner's record was deleted (%d, %v)", n, err)
	}
}

// TestRetriesAfterRetentionAgree: two retries of a key whose completed
// record is past its retention. The second frees the key and completes a
// new execution while the first, which read the expired record, has not
// yet deleted it; the first's delete then matches nothing, and it must
// answer what holds the key now, the second's response, not the deleted
// record it had read. In every claim mode.
func TestRetriesAfterRetentionAgree(t *testing.T) {
	t.Parallel()
	for _, mode := range []ClaimMode{ClaimLast, ClaimFirst, ClaimSeparate} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			r := newRaceEnv(t)
			newEngine := func() *Engine {
				// Nothing cached: the test moves expires_at in the database.
				eng, err := New(r.pool, Options{Schema: r.schema, Claim: mode, ReplayCacheBytes: -1})
				if err != nil {
					t.Fatal(err)
				}
				return eng
			}
			first, second := newEngine(), newEngine()
			op := &Operation{ID: "op", Policy: Policy{Lease: 30 * time.Second}}
			answer := func(body string) []Phase[st] {
				return []Phase[st]{{Name: "final", Final: func(ctx context.Context, tx pgx.Tx, s *st) (*Response, error) {
					return &Response{Status: 201, Body: []byte(body)}, nil
				}}}
			}
			if _, err := Run(ctx, first, op, raceReq("k"), answer("the first execution's")); err != nil {
				t.Fatal(err)
			}
			r.exec(`UPDATE ` + r.schema + `.records SET expires_at = now() - interval '1 second'`)
			var once sync.Once
			var secondOut *Outcome
			first.hooks.afterRead = func() {
				once.Do(func() {
					var err error
					if secondOut, err = Run(ctx, second, op, raceReq("k"), answer("the second execution's")); err != nil {
						t.Errorf("the second retry: %v", err)
					}
				})
			}
			out, err := Run(ctx, first, op, raceReq("k"), answer("a third execution's"))
			if err != nil {
				t.Fatal(err)
			}
			if secondOut == nil || secondOut.Replayed || string(secondOut.Response.Body) != "the second execution's" {
				t.Fatalf("the second retry: %+v; want a new execution", secondOut)
			}
			if got := string(out.Response.Body); got != "the second execution's" || !out.Replayed {
				t.Errorf("the first retry answered %q (replayed %t); want the second execution's response, replayed", got, out.Replayed)
			}
		})
	}
}

// TestResolveRechecksLease: an operator's Resolve read the record
// abandoned, then its owner refreshed the lease before the completion: the
// completion must not happen (the owner is live), and Resolve says the
// record is not abandoned.
func TestResolveRechecksLease(t *testing.T) {
	dbtest.NotPlaced(t, "its records are written by hand, with no placement (the statements it tests are the same in both layouts, or pinned by the id layout's)")
	t.Parallel()
	r := newRaceEnv(t)
	r.claimedAndExpired("k", "one", false)
	r.eng.hooks.afterRead = r.ownerRefreshes("k")
	err := admin{r.eng}.Resolve(context.Background(), "op", "s", "k", adminlink.Resolution{Status: 500, Detail: "settled by hand"})
	if !errors.Is(err, adminlink.ErrNotAbandoned) {
		t.Fatalf("Resolve: %v; want adminlink.ErrNotAbandoned: the owner is live again", err)
	}
	var claimed int
	if err := r.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+r.schema+`.records WHERE owner_token IS NOT NULL`).Scan(&claimed); err != nil || claimed != 1 {
		t.Fatalf("the live owner's record was completed (%d claimed, %v)", claimed, err)
	}
}
