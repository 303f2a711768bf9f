package idem_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/internal/testshort"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

func TestMain(m *testing.M) {
	if os.Getenv(ownerChildEnv) != "" {
		ownerChild() // killed by its parent test
	}
	idemtest.Main(m)
}

// events counts observed events by kind.
type events struct {
	mu sync.Mutex
	n  map[idem.EventKind]int
}

func (e *events) Observe(ev idem.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n[ev.Kind]++
}

func (e *events) count(k idem.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[k]
}

type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	schema string
	eng    *idem.Engine
	ev     *events
	mode   mode
}

// A mode is one configuration the protocol suite runs in: the engine's
// claim mode (Options.Claim, for operations whose policy leaves it auto)
// and its pool's query exec mode.
type mode struct {
	claim idem.ClaimMode
	exec  pgx.QueryExecMode
}

func (m mode) String() string { return string(m.claim) + "/" + m.exec.String() }

// modes is every mode of the protocol suite: each claim mode, with pgx's
// default statement cache and with unnamed statements (exec), as river's
// driver tests run every test per driver. Through a pooler in transaction
// mode (make topology's pooler round) the cache is cache_describe's, as
// docs/operations.md prescribes there: statements prepared by name do not
// survive the pooler's reassignment of server connections.
var modes = func() []mode {
	cache := pgx.QueryExecModeCacheStatement
	if dbtest.Pooled() {
		cache = pgx.QueryExecModeCacheDescribe
	}
	var out []mode
	for _, c := range []idem.ClaimMode{idem.ClaimLast, idem.ClaimFirst, idem.ClaimSeparate} {
		for _, x := range []pgx.QueryExecMode{cache, pgx.QueryExecModeExec} {
			out = append(out, mode{c, x})
		}
	}
	return out
}()

// notIn names a claim mode that a test of the protocol suite cannot apply
// to, and why; inModes leaves it out.
type notIn struct {
	claim idem.ClaimMode
	why   string
}

// inModes runs f as a parallel subtest in every mode but the claim modes
// the test cannot apply to, each with its own schema and engine.
func inModes(t *testing.T, f func(t *testing.T, e *env), except ...notIn) {
	t.Helper()
	for _, m := range modes {
		if slices.ContainsFunc(except, func(n notIn) bool { return n.claim == m.claim }) {
			continue
		}
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			f(t, newEnvIn(t, m, idem.Options{}))
		})
	}
}

// newEnv gives a test its own schema with the engine's tables and a
// business table "rows" (key, note), and an engine in the default claim
// mode on a pool in pgx's default exec mode (cache_describe through a
// pooler).
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvIn(t, mode{idem.ClaimAuto, modes[0].exec}, idem.Options{})
}

// newEnvIn is newEnv in mode m, with the engine built from opts (whose
// Schema, Claim and Observer it sets).
func newEnvIn(t *testing.T, m mode, opts idem.Options) *env {
	t.Helper()
	return newEnvPlaced(t, m, opts, dbtest.Placement())
}

// newEnvPlaced is newEnvIn with the records table laid out by a placement
// column of type typ ("": by id, unless dbtest.PlacementEnv says).
func newEnvPlaced(t *testing.T, m mode, opts idem.Options, typ string) *env {
	t.Helper()
	ev := &events{n: map[idem.EventKind]int{}}
	// Few connections each, so that the suite's parallel tests stay well
	// within a server's default max_connections.
	pool, schema := dbtest.PoolWith(t, func(c *pgxpool.Config) {
		c.ConnConfig.DefaultQueryExecMode = m.exec
		c.MaxConns = 8
	})
	dbtest.MigratePlaced(t, pool, schema, typ)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE rows (key text NOT NULL, note text NOT NULL DEFAULT '')`); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, pool: pool, schema: schema, ev: ev, mode: m}
	opts.Observer = ev
	e.eng = mustEngineWith(t, e, opts)
	return e
}

// fresh is a new env in e's mode: a schema and engine of its own.
func (e *env) fresh(t *testing.T) *env {
	t.Helper()
	return newEnvIn(t, e.mode, idem.Options{})
}

// inline reports whether phases' first local phases run in the claim's
// own transaction in e's mode, where a record is neither visible nor
// taken over before they commit.
func (e *env) inline(phases []idem.Phase[payState]) bool {
	return e.mode.claim != idem.ClaimSeparate && phases[0].Foreign == nil
}

// committedFirst prepends to phases a foreign phase that does nothing, so
// that in every claim mode the claim commits before the phases run: what
// the tests of leases, fencing and takeovers need to see.
func committedFirst(phases []idem.Phase[payState]) []idem.Phase[payState] {
	return append([]idem.Phase[payState]{{Name: "ready", Foreign: func(context.Context, string, *payState) error { return nil }}}, phases...)
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatal(err)
	}
}

// expireLeases makes every live lease expired, as if its owner had been
// gone for longer than the lease.
func (e *env) expireLeases() {
	e.exec(`UPDATE ` + e.schema + `.records SET lease_until = now() - interval '1 second' WHERE owner_token IS NOT NULL`)
}

// noWait is req from a client that will not wait for an execution in
// flight that holds its key (Prefer: wait=0): it is answered 409 at once.
func noWait(req idem.KeyedRequest) idem.KeyedRequest {
	req.Wait, req.WaitSent = 0, true
	return req
}

func request(scope, key, body string) idem.KeyedRequest {
	sum := sha256.Sum256([]byte(body))
	return idem.KeyedRequest{Scope: scope, Key: key, Fingerprint: sum[:], Payload: []byte(body)}
}

// payOp leaves the claim mode to the engine (Options.Claim), which the
// protocol suite sets per mode (inModes).
var payOp = &idem.Operation{ID: "createPayment", Policy: idem.Policy{Lease: 30 * time.Second}}

type payState struct {
	Recorded bool   `json:"recorded"`
	ChargeID string `json:"charge_id"`
}

func created(body string) *idem.Response {
	return &idem.Response{Status: 201, Header: http.Header{
		"Content-Type": {"application/json"}, "Location": {"/p/1"}, "Set-Cookie": {"s=1"}, "X-Trace": {"t"},
	}, Body: []byte(body)}
}

// twoPhases inserts one business row and then answers 201.
func twoPhases(key string) []idem.Phase[payState] {
	return []idem.Phase[payState]{
		{Name: "record", Local: func(ctx context.Context, tx pgx.Tx, s *payState) error {
			_, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ($1)`, key)
			s.Recorded = true
			return err
		}},
		{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
			return created(fmt.Sprintf(`{"key":%q,"recorded":%t}`, key, s.Recorded)), nil
		}},
	}
}

func kindOf(err error) idemtype.ErrorKind {
	var e *idem.Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}

// TestConcurrentSameKey: 64 goroutines send the same key at once; exactly
// one execution commits, the others get 409 or the replay. With a business
// table without a unique key and with one: in ClaimLast every goroutine may
// run the phases, and the losers fail on the record or, with the unique
// key, in the phase on the winner's row; they roll back and replay its
// answer.
func TestConcurrentSameKey(t *testing.T) {
	t.Parallel()
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	inModes(t, func(t *testing.T, e *env) {
		sameKeyRounds(t, e, payOp, rounds)
		e.exec(`TRUNCATE rows`)
		e.exec(`CREATE UNIQUE INDEX ON rows (key)`)
		sameKeyRounds(t, e, &idem.Operation{ID: "unique", Policy: payOp.Policy}, rounds)
	})
}

// sameKeyRounds sends one key from 64 goroutines at once, rounds times:
// exactly one execution may commit, every other answer is its replay or a
// 409, and one business row remains.
func sameKeyRounds(t *testing.T, e *env, op *idem.Operation, rounds int) {
	t.Helper()
	ctx := context.Background()
	for round := 0; round < rounds; round++ {
		key := fmt.Sprintf("round-%d", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		executed, replayed, inFlight := 0, 0, 0
		var bodies [][]byte
		start := make(chan struct{})
		for g := 0; g < 64; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				out, err := idem.Run(ctx, e.eng, op, request("tenant", key, "body"), twoPhases(key))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && out.Replayed:
					replayed++
					bodies = append(bodies, out.Response.Body)
				case err == nil:
					executed++
					bodies = append(bodies, out.Response.Body)
				case kindOf(err) == idemtype.KindInFlight:
					inFlight++
				default:
					t.Errorf("round %d: unexpected error %v", round, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if executed != 1 || executed+replayed+inFlight != 64 {
			t.Fatalf("round %d: executed=%d replayed=%d inFlight=%d; want exactly one execution of 64", round, executed, replayed, inFlight)
		}
		for _, b := range bodies {
			if !bytes.Equal(b, bodies[0]) {
				t.Fatalf("round %d: responses differ: %s vs %s", round, b, bodies[0])
			}
		}
		if n := e.count(`SELECT count(*) FROM rows WHERE key = $1`, key); n != 1 {
			t.Fatalf("round %d: %d business rows, want 1", round, n)
		}
	}
}

// TestFencing: A's lease expires mid-phase, B takes over and completes, A's
// commit is rejected and its business row rolled back.
//
// The phases start with a foreign phase, so that in every mode the claim
// commits before A's local phase runs: a local phase in the claim's own
// transaction has no record anyone could take over (TestInlineClaimIsBoundedByTheLease).
func TestFencing(t *testing.T) {
	t.Parallel()
	inModes(t, testFencing)
}

func testFencing(t *testing.T, e *env) {
	ctx := context.Background()
	inPhase, proceed := make(chan struct{}), make(chan struct{})
	phasesA := committedFirst(twoPhases("k"))
	phasesA[1].Local = func(ctx context.Context, tx pgx.Tx, s *payState) error {
		if _, err := tx.Exec(ctx, `INSERT INTO rows (key, note) VALUES ('k', 'A')`); err != nil {
			return err
		}
		close(inPhase)
		<-proceed // A stalls (a GC pause, a slow network) past its lease
		return nil
	}
	var errA error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, errA = idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), phasesA)
	}()
	<-inPhase
	e.expireLeases()
	outB, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), committedFirst(twoPhases("k")))
	if err != nil || outB.Replayed || outB.Response.Status != 201 {
		t.Fatalf("B: %+v, %v; want a fresh 201 after takeover", outB, err)
	}
	close(proceed)
	<-done
	if kindOf(errA) != idemtype.KindInFlight || !errors.Is(errA, idem.ErrFenced) {
		t.Fatalf("A: err %v; want a fenced in-flight error", errA)
	}
	if n := e.count(`SELECT count(*) FROM rows`); n != 1 {
		t.Fatalf("%d business rows, want exactly B's one", n)
	}
	if n := e.count(`SELECT count(*) FROM rows WHERE note = 'A'`); n != 0 {
		t.Fatal("A's business row was committed")
	}
	if e.ev.count(idem.EventTakeover) != 1 || e.ev.count(idem.EventFenced) != 1 {
		t.Fatalf("takeovers %d fenced %d; want 1 and 1", e.ev.count(idem.EventTakeover), e.ev.count(idem.EventFenced))
	}
	replay, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), committedFirst(twoPhases("k")))
	if err != nil || !replay.Replayed || !bytes.Equal(replay.Response.Body, outB.Response.Body) {
		t.Fatalf("replay after fencing: %+v, %v", replay, err)
	}
}

// card is a fake card network that honours its own idempotency key.
type card struct {
	mu      sync.Mutex
	calls   int
	charges map[string]string // derived key -> charge id
	keys    []string
}

func (c *card) charge(key string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	c.keys = append(c.keys, key)
	if id, ok := c.charges[key]; ok {
		return id
	}
	id := fmt.Sprintf("ch_%d", len(c.charges)+1)
	c.charges[key] = id
	return id
}

// threePhases: record (local), charge (foreign), finish (local, final).
// crashAt names a point at which the execution dies without any cleanup
// (runtime.Goexit: deferred rollbacks run, as a dead connection's would).
func threePhases(key string, cd *card, recordRuns *int, crashAt string) []idem.Phase[payState] {
	crash := func(at string) {
		if at == crashAt {
			runtime.Goexit()
		}
	}
	return []idem.Phase[payState]{
		{Name: "record", Local: func(ctx context.Context, tx pgx.Tx, s *payState) error {
			if _, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ($1)`, key); err != nil {
				return err
			}
			crash("inside-record")
			*recordRuns++
			s.Recorded = true
			return nil
		}},
		{Name: "charge", Foreign: func(ctx context.Context, dkey string, s *payState) error {
			crash("before-charge")
			s.ChargeID = cd.charge(dkey)
			crash("after-charge")
			return nil
		}},
		{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
			if _, err := tx.Exec(ctx, `UPDATE rows SET note = $2 WHERE key = $1`, key, s.ChargeID); err != nil {
				return nil, err
			}
			crash("inside-finish")
			return created(fmt.Sprintf(`{"charge":%q}`, s.ChargeID)), nil
		}},
	}
}

// TestCrashAtEveryRecoveryPoint kills the execution at each point between
// and inside phases; the retry resumes from the right phase, no local phase
// commits twice, and the card network sees one logical charge. Where the
// first phase runs in the claim's own transaction, a crash inside it leaves
// no record at all: the retry executes afresh, at once.
func TestCrashAtEveryRecoveryPoint(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		for _, at := range []string{"inside-record", "before-charge", "after-charge", "inside-finish"} {
			t.Run(at, func(t *testing.T) {
				testCrashAt(t, e.fresh(t), at)
			})
		}
	})
}

func testCrashAt(t *testing.T, e *env, at string) {
	ctx := context.Background()
	cd := &card{charges: map[string]string{}}
	recordRuns := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), threePhases("k", cd, &recordRuns, at))
		t.Error("the crash point was not reached")
	}()
	<-done
	held := !(at == "inside-record" && e.inline(threePhases("k", cd, &recordRuns, "")))
	if held {
		// The dead owner's lease still holds the key...
		if _, err := idem.Run(ctx, e.eng, payOp, noWait(request("t", "k", "b")), threePhases("k", cd, &recordRuns, "")); kindOf(err) != idemtype.KindInFlight {
			t.Fatalf("retry within the lease: %v; want in-flight", err)
		}
		// ...until it expires.
		e.expireLeases()
	}
	out, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), threePhases("k", cd, &recordRuns, ""))
	if err != nil || out.Response.Status != 201 || out.Resumed != held {
		t.Fatalf("retry: %+v, %v; want a 201, resumed: %t", out, err, held)
	}
	if recordRuns != 1 {
		t.Errorf("record phase committed %d times", recordRuns)
	}
	if n := e.count(`SELECT count(*) FROM rows WHERE key = 'k'`); n != 1 {
		t.Errorf("%d business rows, want 1", n)
	}
	if len(cd.charges) != 1 {
		t.Errorf("card network made %d charges, want 1 (keys %v)", len(cd.charges), cd.keys)
	}
	for _, k := range cd.keys {
		if k != cd.keys[0] || len(k) > 64 {
			t.Errorf("derived keys differ or too long: %v", cd.keys)
		}
	}
	if n := e.count(`SELECT count(*) FROM rows WHERE note LIKE 'ch_%'`); n != 1 {
		t.Errorf("finish did not record the charge id exactly once")
	}
	replay, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), threePhases("k", cd, &recordRuns, ""))
	if err != nil || !replay.Replayed || !bytes.Equal(replay.Response.Body, out.Response.Body) {
		t.Fatalf("replay: %+v, %v", replay, err)
	}
}

// TestRelease: a failure before any effect leaves no record, and the same
// key then executes normally.
func TestRelease(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, m *env) {
		cases := map[string]error{
			"validation (release error)": idem.Release(errors.New("amount must be positive")),
			"plain error before effects": errors.New("connection refused"),
			"not implemented stub":       idem.ErrNotImplemented,
		}
		for name, failure := range cases {
			t.Run(name, func(t *testing.T) {
				e := m.fresh(t)
				ctx := context.Background()
				phases := twoPhases("k")
				phases[0].Local = func(ctx context.Context, tx pgx.Tx, s *payState) error {
					if _, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ('k')`); err != nil {
						return err
					}
					return failure
				}
				_, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), phases)
				if !errors.Is(err, failure) && !errors.Is(err, errors.Unwrap(failure)) {
					t.Fatalf("err %v; want the phase's error", err)
				}
				if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records`); n != 0 {
					t.Fatalf("%d records remain after release", n)
				}
				if n := e.count(`SELECT count(*) FROM rows`); n != 0 {
					t.Fatalf("released execution left %d business rows", n)
				}
				out, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "another body is fine now"), twoPhases("k"))
				if err != nil || out.Replayed || out.Response.Status != 201 {
					t.Fatalf("after release: %+v, %v", out, err)
				}
			})
		}
	})
}

// TestReleaseAfterCommitIsAmbiguous: once a phase committed, a release
// error cannot free the key (effects exist); the record resumes instead.
func TestReleaseAfterCommitIsAmbiguous(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		phases := threePhases("k", &card{charges: map[string]string{}}, new(int), "")
		phases[1].Foreign = func(ctx context.Context, key string, s *payState) error {
			return idem.Release(errors.New("declined early"))
		}
		_, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), phases)
		if kindOf(err) != idemtype.KindFailed {
			t.Fatalf("err %v; want failed", err)
		}
		if n := e.count(`SELECT count(*) FROM ` + e.schema + `.records WHERE owner_token IS NOT NULL AND recovery_point = 'record'`); n != 1 {
			t.Fatal("the record was not kept at its recovery point")
		}
	})
}

func sameResponse(a, b *idem.Response) bool {
	return a.Status == b.Status && bytes.Equal(a.Body, b.Body) && fmt.Sprint(a.Header) == fmt.Sprint(b.Header)
}

// TestReplayIsByteIdentical for a success and for a stored business error.
func TestReplayIsByteIdentical(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		declined := []idem.Phase[payState]{{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
			return &idem.Response{Status: 402, Header: http.Header{"Content-Type": {"application/problem+json"}},
				Body: []byte(`{"type":"urn:example:declined","status":402}` + "\n")}, nil
		}}}
		for name, phases := range map[string][]idem.Phase[payState]{"success": twoPhases("k1"), "business error": declined} {
			first, err := idem.Run(ctx, e.eng, payOp, request("t", name, "b"), phases)
			if err != nil {
				t.Fatal(err)
			}
			stored := &idem.Response{Status: first.Response.Status, Header: http.Header{}, Body: first.Response.Body}
			for _, h := range []string{"Content-Type", "Location"} {
				if v, ok := first.Response.Header[h]; ok {
					stored.Header[h] = v
				}
			}
			for i := 0; i < 3; i++ {
				again, err := idem.Run(ctx, e.eng, payOp, request("t", name, "b"), phases)
				if err != nil || !again.Replayed {
					t.Fatalf("%s: replay %d: %+v, %v", name, i, again, err)
				}
				if !sameResponse(again.Response, stored) {
					t.Fatalf("%s: replay differs:\n got %d %v %q\nwant %d %v %q", name, again.Response.Status, again.Response.Header,
						again.Response.Body, stored.Status, stored.Header, stored.Body)
				}
				if again.Response.Header.Get("Set-Cookie") != "" || again.Response.Header.Get("X-Trace") != "" {
					t.Fatalf("%s: a header outside the replay list was stored", name)
				}
			}
		}
	})
}

// TestMismatch: same key, different body gives 422; field order,
// whitespace and excluded fields do not.
func TestMismatch(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		req := func(body string) idem.KeyedRequest {
			fp, err := idemhttp.Fingerprint(idemhttp.Request{Method: "POST", Route: "/payments", ContentType: "application/json",
				Body: []byte(body), Exclude: []string{"/client_ts"}})
			if err != nil {
				t.Fatal(err)
			}
			return idem.KeyedRequest{Scope: "t", Key: "k", Fingerprint: fp}
		}
		if _, err := idem.Run(ctx, e.eng, payOp, req(`{"amount":100,"currency":"EUR","client_ts":"1"}`), twoPhases("k")); err != nil {
			t.Fatal(err)
		}
		for _, same := range []string{`{"currency":"EUR","amount":100}`, " {\"amount\" : 100 ,\n \"currency\":\"EUR\", \"client_ts\":\"2\"} "} {
			out, err := idem.Run(ctx, e.eng, payOp, req(same), twoPhases("k"))
			if err != nil || !out.Replayed {
				t.Errorf("%s: %v; want a replay", same, err)
			}
		}
		_, err := idem.Run(ctx, e.eng, payOp, req(`{"amount":200,"currency":"EUR"}`), twoPhases("k"))
		if kindOf(err) != idemtype.KindMismatch {
			t.Fatalf("different body: %v; want key-reused (422)", err)
		}
		if e.ev.count(idem.EventMismatch) != 1 {
			t.Fatal("mismatch not observed")
		}
	})
}

// TestScopeIsolation: tenant B sending tenant A's key never sees A's
// response; each executes on its own.
func TestScopeIsolation(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		respond := func(tenant string) []idem.Phase[payState] {
			return []idem.Phase[payState]{{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
				return created(`{"tenant":"` + tenant + `"}`), nil
			}}}
		}
		a, err := idem.Run(ctx, e.eng, payOp, request("tenant-a", "shared-key", "b"), respond("a"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := idem.Run(ctx, e.eng, payOp, request("tenant-b", "shared-key", "b"), respond("b"))
		if err != nil || b.Replayed || bytes.Equal(a.Response.Body, b.Response.Body) {
			t.Fatalf("tenant B got %+v, %v; want its own execution", b, err)
		}
		// A different body under B's scope is no mismatch with A's record.
		c, err := idem.Run(ctx, e.eng, payOp, request("tenant-c", "shared-key", "other"), respond("c"))
		if err != nil || string(c.Response.Body) != `{"tenant":"c"}` {
			t.Fatalf("tenant C: %+v, %v", c, err)
		}
		// Same key, another operation: another namespace.
		other := &idem.Operation{ID: "createRefund", Policy: payOp.Policy}
		d, err := idem.Run(ctx, e.eng, other, request("tenant-a", "shared-key", "b"), respond("refund"))
		if err != nil || d.Replayed {
			t.Fatalf("other operation: %+v, %v", d, err)
		}
		// A group shares one namespace across operations.
		g1 := &idem.Operation{ID: "op1", Namespace: "grp", Policy: payOp.Policy}
		g2 := &idem.Operation{ID: "op2", Namespace: "grp", Policy: payOp.Policy}
		if _, err := idem.Run(ctx, e.eng, g1, request("t", "gk", "b"), respond("g1")); err != nil {
			t.Fatal(err)
		}
		if _, err := idem.Run(ctx, e.eng, g2, request("t", "gk", "b"), respond("g2")); kindOf(err) != idemtype.KindMismatch {
			t.Fatalf("group: a key reused by another operation of the group: %v; want 422", err)
		}
	})
}

// TestAmbiguousResume: a failure after a commit keeps the record at its
// recovery point and yields the lease; the retry resumes at once.
func TestAmbiguousResume(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		cd := &card{charges: map[string]string{}}
		runs := 0
		phases := threePhases("k", cd, &runs, "")
		phases[1].Foreign = func(ctx context.Context, key string, s *payState) error {
			cd.charge(key) // the charge happened, but the answer was lost
			return errors.New("card network: connection reset")
		}
		_, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), phases)
		if kindOf(err) != idemtype.KindFailed {
			t.Fatalf("err %v; want failed (500)", err)
		}
		out, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), threePhases("k", cd, &runs, ""))
		if err != nil || !out.Resumed || runs != 1 || len(cd.charges) != 1 {
			t.Fatalf("resume: %+v, %v; record runs %d, charges %d", out, err, runs, len(cd.charges))
		}
	})
}

// TestAmbiguousStore: with ambiguous: store, the 500 is stored and replayed.
func TestAmbiguousStore(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		op := &idem.Operation{ID: "storeOp", Policy: idem.Policy{Lease: 30 * time.Second, Ambiguous: idemtype.AmbiguousStore}}
		phases := threePhases("k", &card{charges: map[string]string{}}, new(int), "")
		phases[1].Foreign = func(ctx context.Context, key string, s *payState) error { return errors.New("timeout") }
		first, err := idem.Run(ctx, e.eng, op, request("t", "k", "b"), phases)
		if err != nil || first.Response.Status != 500 {
			t.Fatalf("first: %+v, %v; want a stored 500", first, err)
		}
		again, err := idem.Run(ctx, e.eng, op, request("t", "k", "b"), threePhases("k", &card{charges: map[string]string{}}, new(int), ""))
		if err != nil || !again.Replayed || !sameResponse(again.Response, first.Response) {
			t.Fatalf("replay: %+v, %v", again, err)
		}
	})
}

// TestLeaseRefresh: a phase longer than the lease keeps its claim; when the
// lease is taken over, the phase's context is cancelled.
func TestLeaseRefresh(t *testing.T) {
	t.Parallel()
	testshort.Long(t) // a phase sleeps well past a 3s lease
	inModes(t, func(t *testing.T, e *env) { testLeaseRefresh(t, e) })
}

func testLeaseRefresh(t *testing.T, e *env) {
	ctx := context.Background()
	op := &idem.Operation{ID: "slow", Policy: idem.Policy{Lease: 3 * time.Second}}
	inPhase := make(chan struct{})
	// The claim commits first in every mode: a phase in the claim's own
	// transaction is bounded by the lease instead (TestClaimIsBoundedByTheLease).
	slow := committedFirst([]idem.Phase[payState]{{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
		close(inPhase)
		time.Sleep(7 * time.Second) // well past the lease
		return created("{}"), nil
	}}})
	go func() {
		<-inPhase
		time.Sleep(4500 * time.Millisecond) // past one lease: refreshed, still live
		_, err := idem.Run(ctx, e.eng, op, noWait(request("t", "slow", "b")), slow)
		if kindOf(err) != idemtype.KindInFlight {
			t.Errorf("during a refreshed lease: %v; want in-flight", err)
		}
	}()
	out, err := idem.Run(ctx, e.eng, op, request("t", "slow", "b"), slow)
	if err != nil || out.Response.Status != 201 {
		t.Fatalf("slow execution: %+v, %v", out, err)
	}
}

// TestRefreshIsFenced: when the lease is taken over during a phase, the
// owner's next refresh is fenced and cancels the phase's context.
func TestRefreshIsFenced(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		op := &idem.Operation{ID: "slow", Policy: idem.Policy{Lease: 3 * time.Second}}
		inPhase2 := make(chan struct{})
		// The claim commits first in every mode, so that the keeper refreshes it.
		waits := committedFirst([]idem.Phase[payState]{{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
			close(inPhase2)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(6 * time.Second): // two refresh intervals and more
				return nil, errors.New("the phase was not cancelled")
			}
		}}})
		done := make(chan error)
		go func() {
			_, err := idem.Run(ctx, e.eng, op, request("t", "fenced", "b"), waits)
			done <- err
		}()
		<-inPhase2
		// A new owner made here, not by gen_random_uuid(): Citus runs no
		// VOLATILE function in an UPDATE of a distributed table.
		var owner string
		if err := e.pool.QueryRow(ctx, `SELECT gen_random_uuid()::text`).Scan(&owner); err != nil {
			t.Fatal(err)
		}
		e.exec(`UPDATE `+e.schema+`.records SET owner_token = $1::uuid WHERE key = 'fenced'`, owner)
		if err := <-done; !errors.Is(err, idem.ErrFenced) {
			t.Fatalf("err %v; want fenced", err)
		}
	})
}

// abandonBackground registers a background operation whose completer runs
// threePhases changed by completed, and leaves an execution of key dead
// after its card charge: a record for the completer.
func abandonBackground(e *env, key string, cd *card, runs *int, completed func([]idem.Phase[payState]) []idem.Phase[payState]) *idem.Operation {
	op := &idem.Operation{ID: "bg", Policy: idem.Policy{Lease: 30 * time.Second, Complete: idemtype.CompleteBackground}}
	idem.RegisterCompleter(e.eng, op, func(payload []byte) ([]idem.Phase[payState], error) {
		return completed(threePhases(string(payload), cd, runs, "")), nil
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		idem.Run(context.Background(), e.eng, op, request("t", key, "k"), threePhases("k", cd, runs, "after-charge"))
	}()
	<-done
	return op
}

// TestBackgroundCompleter finishes an abandoned execution without a retry.
func TestBackgroundCompleter(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		cd := &card{charges: map[string]string{}}
		runs := 0
		op := abandonBackground(e, "bgkey", cd, &runs, func(ps []idem.Phase[payState]) []idem.Phase[payState] { return ps })
		if n, err := idemadmin.CompleteAbandoned(ctx, e.eng, 10); n != 0 || err != nil {
			t.Fatalf("completed %d (%v) while the lease was live", n, err)
		}
		e.expireLeases()
		if n, err := idemadmin.CompleteAbandoned(ctx, e.eng, 10); n != 1 || err != nil {
			t.Fatalf("CompleteAbandoned = %d, %v; want 1", n, err)
		}
		if runs != 1 || len(cd.charges) != 1 || e.count(`SELECT count(*) FROM rows WHERE note LIKE 'ch_%'`) != 1 {
			t.Fatalf("record runs %d, charges %d", runs, len(cd.charges))
		}
		out, err := idem.Run(ctx, e.eng, op, request("t", "bgkey", "k"), threePhases("k", cd, &runs, ""))
		if err != nil || !out.Replayed || out.Response.Status != 201 {
			t.Fatalf("retry after background completion: %+v, %v", out, err)
		}
		if e.ev.count(idem.EventCompleterRun) != 1 || e.ev.count(idem.EventCompleterFailed) != 0 {
			t.Fatalf("completer runs observed %d, failures %d; want 1 and 0", e.ev.count(idem.EventCompleterRun), e.ev.count(idem.EventCompleterFailed))
		}
	})
}

// TestCompleterFailureIsObserved: a record the completer takes over and
// whose phases then fail is observed as completer_failed (the alert
// IdemgenCompleterFailing), not as a run.
func TestCompleterFailureIsObserved(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		cd := &card{charges: map[string]string{}}
		runs := 0
		abandonBackground(e, "bgfail", cd, &runs, func(ps []idem.Phase[payState]) []idem.Phase[payState] {
			ps[2].Final = func(context.Context, pgx.Tx, *payState) (*idem.Response, error) {
				return nil, errors.New("the ledger refused")
			}
			return ps
		})
		e.expireLeases()
		if n, err := idemadmin.CompleteAbandoned(ctx, e.eng, 10); n != 0 || err == nil {
			t.Fatalf("CompleteAbandoned = %d, %v; want 0 and the phase's error", n, err)
		}
		if got, runs := e.ev.count(idem.EventCompleterFailed), e.ev.count(idem.EventCompleterRun); got != 1 || runs != 0 {
			t.Fatalf("completer failures observed %d, runs %d; want 1 and 0", got, runs)
		}
	})
}

// TestExpiredRecordFreesKey: a record past retention no longer holds its key
// even before the pruner runs.
func TestExpiredRecordFreesKey(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		// The test moves expires_at in the database; a cached copy would still
		// expire with the real retention, so this engine caches nothing.
		e.eng = mustEngineWith(t, e, idem.Options{ReplayCacheBytes: -1})
		ctx := context.Background()
		if _, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), twoPhases("k")); err != nil {
			t.Fatal(err)
		}
		e.exec(`UPDATE ` + e.schema + `.records SET expires_at = now() - interval '1 second'`)
		out, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "different body"), twoPhases("k"))
		if err != nil || out.Replayed {
			t.Fatalf("after retention: %+v, %v; want a new execution", out, err)
		}
	})
}
