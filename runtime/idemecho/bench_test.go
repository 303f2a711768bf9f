package idemecho_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemstd"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// counter is a pgx tracer that counts round trips (every query, exec and
// batch sent) and commits (a COMMIT that succeeded, alone or in a batch, or
// a write outside a transaction, which commits by itself), so that the
// benchmark reports them as measured rather than as estimated.
type counter struct{ trips, commits atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.trips.Add(1)
	return ctx
}

func (c *counter) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	if d.Err != nil {
		return
	}
	tag := d.CommandTag
	if tag.String() == "COMMIT" || ((tag.Insert() || tag.Update() || tag.Delete()) && conn.PgConn().TxStatus() == 'I') {
		c.commits.Add(1)
	}
}

func (c *counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.trips.Add(1)
	return ctx
}

// TraceBatchQuery counts the COMMIT that travels in a batch (the engine
// sends the completion and COMMIT together).
func (c *counter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if d.Err == nil && d.CommandTag.String() == "COMMIT" {
		c.commits.Add(1)
	}
}
func (c *counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// benchService is every handler of the benchmark on one echo instance, the
// same on one net/http ServeMux (paths under /std), and one pool. With a
// counter, the pool traces every statement into it.
type benchService struct {
	e      *echo.Echo
	std    *http.ServeMux
	count  *counter
	placed bool // requests name their tenant (X-Tenant)
	// more are the service's instances on the other entries
	// (benchEntriesEnv), which requests go to in turn with e and std.
	more []benchEntry
	turn atomic.Uint64
	// entryOf is, with placement on Citus, the entry (0: e and std, i:
	// more[i-1]) on the worker of each tenant's shard: a service that
	// sends a tenant's requests to its worker, as a tenant-aware load
	// balancer does. Nil: entries in turn.
	entryOf map[int]int
}

// benchEntry is one instance of the benchmark's service: its echo and
// net/http handlers, on a pool of its own.
type benchEntry struct {
	e   *echo.Echo
	std *http.ServeMux
}

// benchEntriesEnv names the environment variable that lists, comma
// separated, the connection strings the benchmark's service instances
// connect to, one instance each, requests going to them in turn (Citus'
// workers: any node an entry); the schema is still made through
// DATABASE_URL (a Citus coordinator, which runs DDL). Unset: one instance
// on DATABASE_URL.
const benchEntriesEnv = "IDEMGEN_BENCH_ENTRIES"

// benchTenants is how many tenants the requests are spread over, with
// placement.
const benchTenants = 64

func newBenchService(b *testing.B, count *counter) *benchService {
	schema := dbtest.Schema(b)
	cfg, err := pgxpool.ParseConfig(dbtest.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 40
	if count != nil {
		cfg.ConnConfig.Tracer = count
	}
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	dbtest.Migrate(b, pool, schema)
	// With dbtest.PlacementEnv (bigint), the layout a Citus user chooses
	// for a multi-tenant API: the business table keyed and distributed by
	// tenant, the records placed by it and co-located (dbtest.Migrate),
	// and each request's tenant in its X-Tenant header.
	placed := dbtest.Placement() != ""
	if placed && dbtest.Placement() != "bigint" {
		b.Fatalf("the benchmark places by a bigint tenant; %s=%s", dbtest.PlacementEnv, dbtest.Placement())
	}
	table := `CREATE TABLE bench (id bigserial PRIMARY KEY, amount int, charge text)`
	if placed {
		table = `CREATE TABLE bench (tenant bigint NOT NULL, id bigserial, amount int, charge text, PRIMARY KEY (tenant, id))`
	}
	if _, err := pool.Exec(ctx, table); err != nil {
		b.Fatal(err)
	}
	switch {
	case dbtest.Citus() && placed:
		if _, err := pool.Exec(ctx, `SELECT create_distributed_table('bench', 'tenant', colocate_with => 'tenants')`); err != nil {
			b.Fatal(err)
		}
	case dbtest.Citus():
		// On Citus the business table is distributed too, as a user's is:
		// by its own key, so that a request's row and its record are on the
		// same worker about as often as chance puts them there.
		if _, err := pool.Exec(ctx, `SELECT create_distributed_table('bench', 'id')`); err != nil {
			b.Fatal(err)
		}
	}
	// insert is the business row's insert; tenant is the request's (its
	// X-Tenant header, or its execution's placement).
	insert := `INSERT INTO bench (amount) VALUES (100) RETURNING id`
	update := `UPDATE bench SET charge = $2 WHERE id = $1`
	if placed {
		insert = `INSERT INTO bench (tenant, amount) VALUES ($1, 100) RETURNING id`
		update = `UPDATE bench SET charge = $2 WHERE id = $1 AND tenant = $3`
	}
	insertArgs := func(tenant string) []any {
		if placed {
			return []any{tenant}
		}
		return nil
	}
	updateArgs := func(id int64, charge, tenant string) []any {
		if placed {
			return []any{id, charge, tenant}
		}
		return []any{id, charge}
	}
	tenantOf := func(ctx context.Context) string {
		if x := idem.ExecutionFrom(ctx); x != nil && placed {
			return x.Placement
		}
		return "0"
	}
	build := func(pool *pgxpool.Pool) benchEntry {
		e := echo.New()
		created := func(c echo.Context, id int64) error { return c.JSON(201, map[string]int64{"id": id}) }
		e.POST("/plain", func(c echo.Context) error {
			var id int64
			if err := pool.QueryRow(c.Request().Context(), insert, insertArgs(c.Request().Header.Get("X-Tenant"))...).Scan(&id); err != nil {
				return err
			}
			return created(c, id)
		})
		e.POST("/plain-tx", func(c echo.Context) error {
			var id int64
			err := pgx.BeginFunc(c.Request().Context(), pool, func(tx pgx.Tx) error {
				return tx.QueryRow(c.Request().Context(), insert, insertArgs(c.Request().Header.Get("X-Tenant"))...).Scan(&id)
			})
			if err != nil {
				return err
			}
			return created(c, id)
		})
		type state struct {
			ID     int64  `json:"id"`
			Charge string `json:"charge"`
		}
		respond := func(id int64) (*idem.Response, error) {
			return idemecho.Render(func(w http.ResponseWriter) error {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(201)
				_, err := fmt.Fprintf(w, `{"id":%d}`+"\n", id)
				return err
			})
		}
		single := []idem.Phase[state]{{Name: "insert", Final: func(ctx context.Context, tx pgx.Tx, s *state) (*idem.Response, error) {
			if err := tx.QueryRow(ctx, insert, insertArgs(tenantOf(ctx))...).Scan(&s.ID); err != nil {
				return nil, err
			}
			return respond(s.ID)
		}}}
		three := []idem.Phase[state]{
			{Name: "record", Local: func(ctx context.Context, tx pgx.Tx, s *state) error {
				return tx.QueryRow(ctx, insert, insertArgs(tenantOf(ctx))...).Scan(&s.ID)
			}},
			{Name: "charge", Foreign: func(ctx context.Context, key string, s *state) error {
				s.Charge = "ch_" + key[len(key)-8:] // an in-process card network with no latency
				return nil
			}},
			{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *state) (*idem.Response, error) {
				if _, err := tx.Exec(ctx, update, updateArgs(s.ID, s.Charge, tenantOf(ctx))...); err != nil {
					return nil, err
				}
				return respond(s.ID)
			}},
		}
		for _, cached := range []bool{true, false} {
			opts := idem.Options{Schema: schema}
			prefix := "/idem"
			if !cached {
				opts.ReplayCacheBytes, prefix = -1, "/cold"
			}
			eng, err := idem.New(pool, opts)
			if err != nil {
				b.Fatal(err)
			}
			rt := &idemecho.Runtime{Engine: eng, Principal: func(echo.Context) (string, error) { return "acct", nil }}
			for name, op := range map[string]struct {
				phases []idem.Phase[state]
				claim  idem.ClaimMode
			}{"single": {single, idem.ClaimAuto}, "first": {single, idem.ClaimFirst}, "separate": {single, idem.ClaimSeparate}, "three": {three, idem.ClaimAuto}} {
				phases := op.phases
				spec := &idemecho.Spec{Operation: &idem.Operation{ID: name, Policy: idem.Policy{Lease: 30 * time.Second, Claim: op.claim}},
					Key: idemhttp.KeyRule{Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopePrincipal}, Route: "/" + name}
				if placed {
					spec.Placement = idemtype.Placement{Kind: idemtype.PlacementHeader, Name: "X-Tenant"}
				}
				e.POST(prefix+"/"+name, func(c echo.Context) error {
					resp, err := idemecho.Execute(c.Request().Context(), rt, nil, phases)
					if err != nil {
						return err
					}
					return idemecho.Writer(c.Request().Context(), resp)(c.Response())
				}, idemecho.Middleware(rt, spec))
			}
		}
		// The newer models, beside phases: a kept handler with its final
		// transaction (kept), the same with a Local and a Foreign step first
		// (kept-steps), and an operation whose replays are rendered again from
		// the identifiers it stores (rendered).
		keptEng, err := idem.New(pool, idem.Options{Schema: schema})
		if err != nil {
			b.Fatal(err)
		}
		keptRT := &idemecho.Runtime{Engine: keptEng, Principal: func(echo.Context) (string, error) { return "acct", nil }}
		finalTx := func(ctx context.Context) (*idem.Response, error) {
			tx, err := idem.Begin(ctx, pool)
			if err != nil {
				return nil, err
			}
			defer tx.Rollback(ctx)
			var id int64
			if err := tx.QueryRow(ctx, insert, insertArgs(tenantOf(ctx))...).Scan(&id); err != nil {
				return nil, err
			}
			if err := tx.Commit(ctx); err != nil {
				return nil, err
			}
			return respond(id)
		}
		kept := map[string]idem.Handler{
			"kept": finalTx,
			"kept-steps": func(ctx context.Context) (*idem.Response, error) {
				if _, err := idem.Local(ctx, pool, "record", func(ctx context.Context, tx pgx.Tx) (int64, error) {
					var id int64
					return id, tx.QueryRow(ctx, insert, insertArgs(tenantOf(ctx))...).Scan(&id)
				}); err != nil {
					return nil, err
				}
				if _, err := idem.Foreign(ctx, "charge", func(_ context.Context, key string) (string, error) {
					return "ch_" + key[len(key)-8:], nil // an in-process card network with no latency
				}); err != nil {
					return nil, err
				}
				return finalTx(ctx)
			},
		}
		for name, h := range kept {
			spec := &idemecho.Spec{Operation: &idem.Operation{ID: name, Policy: idem.Policy{Lease: 30 * time.Second}},
				Key: idemhttp.KeyRule{Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopePrincipal}, Route: "/" + name}
			if placed {
				spec.Placement = idemtype.Placement{Kind: idemtype.PlacementHeader, Name: "X-Tenant"}
			}
			e.POST("/idem/"+name, func(c echo.Context) error {
				resp, err := idemecho.ExecuteHandler(c.Request().Context(), keptRT, h)
				if err != nil {
					return err
				}
				return idemecho.Writer(c.Request().Context(), resp)(c.Response())
			}, idemecho.Middleware(keptRT, spec))
		}
		rendered := []idem.Phase[state]{{Name: "insert",
			Final: single[0].Final,
			Render: func(ctx context.Context, tx pgx.Tx, ref idem.Reference) (*idem.Response, error) {
				id, err := ref.Int64("/id")
				if err != nil {
					return nil, err
				}
				return respond(id)
			}}}
		renderSpec := &idemecho.Spec{Operation: &idem.Operation{ID: "rendered", Policy: idem.Policy{Lease: 30 * time.Second, Render: []string{"/id"}}},
			Key: idemhttp.KeyRule{Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopePrincipal}, Route: "/rendered"}
		if placed {
			renderSpec.Placement = idemtype.Placement{Kind: idemtype.PlacementHeader, Name: "X-Tenant"}
		}
		e.POST("/idem/rendered", func(c echo.Context) error {
			resp, err := idemecho.Execute(c.Request().Context(), keptRT, nil, rendered)
			if err != nil {
				return err
			}
			return idemecho.Writer(c.Request().Context(), resp)(c.Response())
		}, idemecho.Middleware(keptRT, renderSpec))
		std := stdBenchRoutes(b, pool, schema, single, respond, insert, func(r *http.Request) []any { return insertArgs(r.Header.Get("X-Tenant")) }, placed)
		return benchEntry{e, std}
	}
	first := build(pool)
	s := &benchService{e: first.e, std: first.std, count: count, placed: placed}
	if urls := os.Getenv(benchEntriesEnv); urls != "" {
		for i, url := range strings.Split(urls, ",") {
			cfg, err := pgxpool.ParseConfig(url)
			if err != nil {
				b.Fatal(err)
			}
			cfg.ConnConfig.RuntimeParams["search_path"] = schema
			cfg.ConnConfig.Database = pool.Config().ConnConfig.Database // the test's database, on that node
			cfg.MaxConns = 40
			if count != nil {
				cfg.ConnConfig.Tracer = count
			}
			entry, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(entry.Close)
			if i == 0 {
				// The first entry takes the place of DATABASE_URL's.
				first = build(entry)
				s.e, s.std = first.e, first.std
			} else {
				s.more = append(s.more, build(entry))
			}
			if placed && dbtest.Citus() {
				if s.entryOf == nil {
					s.entryOf = map[int]int{}
				}
				// The tenants whose shard is on this entry's node.
				rows, err := pool.Query(ctx, `SELECT t FROM generate_series(1, $2::int) AS t
					JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('bench', t)
					JOIN pg_dist_node n ON n.groupid = p.groupid WHERE n.nodeport = $1`, cfg.ConnConfig.Port, benchTenants)
				if err != nil {
					b.Fatal(err)
				}
				tenants, err := pgx.CollectRows(rows, pgx.RowTo[int])
				if err != nil {
					b.Fatal(err)
				}
				for _, t := range tenants {
					s.entryOf[t] = i
				}
			}
		}
	}
	return s
}

// stdBenchRoutes are the net/http rows' handlers: plain, plain-tx and
// single-phase, as the echo ones, on a ServeMux with idemstd.
func stdBenchRoutes[S any](b *testing.B, pool *pgxpool.Pool, schema string, single []idem.Phase[S], respond func(int64) (*idem.Response, error),
	insert string, args func(*http.Request) []any, placed bool) *http.ServeMux {
	mux := http.NewServeMux()
	created := func(w http.ResponseWriter, id int64) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(map[string]int64{"id": id})
	}
	mux.HandleFunc("POST /std/plain", func(w http.ResponseWriter, r *http.Request) {
		var id int64
		if err := pool.QueryRow(r.Context(), insert, args(r)...).Scan(&id); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		created(w, id)
	})
	mux.HandleFunc("POST /std/plain-tx", func(w http.ResponseWriter, r *http.Request) {
		var id int64
		err := pgx.BeginFunc(r.Context(), pool, func(tx pgx.Tx) error {
			return tx.QueryRow(r.Context(), insert, args(r)...).Scan(&id)
		})
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		created(w, id)
	})
	eng, err := idem.New(pool, idem.Options{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	rt := &idemstd.Runtime{Engine: eng, Principal: func(*http.Request) (string, error) { return "acct", nil }}
	spec := &idemstd.Spec{Operation: &idem.Operation{ID: "std-single", Policy: idem.Policy{Lease: 30 * time.Second}},
		Key: idemhttp.KeyRule{Required: true}, Scope: idemtype.Scope{Kind: idemtype.ScopePrincipal}, Route: "/std/idem/single"}
	if placed {
		spec.Placement = idemtype.Placement{Kind: idemtype.PlacementHeader, Name: "X-Tenant"}
	}
	mux.Handle("POST /std/idem/single", idemstd.Middleware(rt, spec)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := idemstd.Execute(r.Context(), eng, nil, single)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		idemstd.Writer(r.Context(), resp)(w)
	})))
	return mux
}

func (s *benchService) do(b *testing.B, path, key string) {
	req := httptest.NewRequest("POST", path, strings.NewReader(`{"amount":100}`))
	req.Header.Set("Content-Type", "application/json")
	tenant := 0
	if s.placed {
		tenant = 1 + rand.IntN(benchTenants)
		req.Header.Set("X-Tenant", strconv.Itoa(tenant))
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	e, std := s.e, s.std
	if len(s.more) > 0 {
		i, ok := s.entryOf[tenant]
		if !ok {
			i = int(s.turn.Add(1) % uint64(len(s.more)+1))
		}
		if i > 0 {
			e, std = s.more[i-1].e, s.more[i-1].std
		}
	}
	if strings.HasPrefix(path, "/std/") {
		std.ServeHTTP(rec, req)
	} else {
		e.ServeHTTP(rec, req)
	}
	if rec.Code != 201 {
		b.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
	}
}

// BenchmarkEngine measures, side by side on one database, a plain handler
// (one autocommit insert), the same insert in BEGIN/COMMIT (plain-tx), the
// insert as an idempotent operation's only phase (single-phase) and in the
// payments shape (three-phase: local, foreign, local), each with a new key
// per request, and replays of one key from the in-process cache (replay)
// and from the store (replay-cold), at 1 and 16 concurrent clients. It
// reports requests/s, p50 and p99 latency, round trips and commits per
// request (counted by a pgx tracer) and allocations. `make bench` runs it
// on a durable PostgreSQL and summarises the medians and ratios.
//
// Round trips and commits are counted on a service of their own whose pool
// has the counting tracer, over calibrate requests before each measurement;
// the measurement itself runs on a pool without a tracer, as a service
// runs, so that neither side's figures include what tracing costs (the
// engine boxes its arguments for a tracer only when there is one).
func BenchmarkEngine(b *testing.B) {
	s := newBenchService(b, nil)
	counted := newBenchService(b, &counter{})
	var run atomic.Int64
	cases := []benchSpec{
		{"plain", "/plain", nil},
		{"plain-tx", "/plain-tx", nil},
		{"single-phase", "/idem/single", func(r, i int64) string { return fmt.Sprintf("s-%d-%d", r, i) }},
		{"single-phase-claim-first", "/idem/first", func(r, i int64) string { return fmt.Sprintf("f-%d-%d", r, i) }},
		{"single-phase-separate-claim", "/idem/separate", func(r, i int64) string { return fmt.Sprintf("p-%d-%d", r, i) }},
		{"three-phase", "/idem/three", func(r, i int64) string { return fmt.Sprintf("t-%d-%d", r, i) }},
		{"replay", "/idem/single", func(int64, int64) string { return "replayed" }},
		{"replay-cold", "/cold/single", func(int64, int64) string { return "replayed-cold" }},
		{"kept", "/idem/kept", func(r, i int64) string { return fmt.Sprintf("k-%d-%d", r, i) }},
		{"kept-steps", "/idem/kept-steps", func(r, i int64) string { return fmt.Sprintf("ks-%d-%d", r, i) }},
		{"replay-rendered", "/idem/rendered", func(int64, int64) string { return "replayed-rendered" }},
		// The same service on net/http's ServeMux with runtime/idemstd:
		// its own plain handlers, its own ratios.
		{"std-plain", "/std/plain", nil},
		{"std-plain-tx", "/std/plain-tx", nil},
		{"std-single-phase", "/std/idem/single", func(r, i int64) string { return fmt.Sprintf("n-%d-%d", r, i) }},
	}
	// Rounds (benchRounds) run every case once each, the order reversed
	// every other round: a ratio is taken within a round (scripts/benchtable.awk),
	// between runs seconds apart, and a drift of the machine over a round
	// weighs on each side alike over two.
	for round := range benchRounds(b) {
		for _, clients := range []int{1, 16} {
			order := slices.Clone(cases)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, tc := range order {
				benchCase(b, s, counted, &run, clients, tc)
			}
		}
	}
}

// benchRounds is IDEMGEN_BENCH_ROUNDS, 1 if unset: make bench runs its
// rounds in one process, on one database, with -count 1.
func benchRounds(b *testing.B) int {
	v := os.Getenv("IDEMGEN_BENCH_ROUNDS")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("IDEMGEN_BENCH_ROUNDS=%q: want a positive number of rounds", v)
	}
	return n
}

// benchSpec is a case of BenchmarkEngine: a path, and the key of each of its
// requests (none for the plain handlers).
type benchSpec struct {
	name string
	path string
	key  func(run, i int64) string
}

// benchCase runs one case at a number of clients (a sub-benchmark of its
// own; repeated in later rounds under the same name, which testing numbers
// #01, #02, ...).
func benchCase(b *testing.B, s, counted *benchService, run *atomic.Int64, clients int, tc benchSpec) {
	const calibrate = 50
	b.Run(fmt.Sprintf("c%d/%s", clients, tc.name), func(b *testing.B) {
		r := run.Add(1)
		if tc.key != nil && strings.HasPrefix(tc.name, "replay") {
			s.do(b, tc.path, tc.key(r, 0)) // the first request completes the key
			counted.do(b, tc.path, tc.key(r, 0))
		}
		var seq atomic.Int64
		next := func() string { // a request's key: a new one each, none for plain
			if tc.key == nil {
				return ""
			}
			return tc.key(r, seq.Add(1))
		}
		trips, commits := counted.count.trips.Load(), counted.count.commits.Load()
		for range calibrate {
			counted.do(b, tc.path, next())
		}
		// Reported at the end: ResetTimer drops metrics reported before it.
		trips = counted.count.trips.Load() - trips
		commits = counted.count.commits.Load() - commits
		var mu sync.Mutex
		var lat []time.Duration
		one := func(mine *[]time.Duration) {
			key := next()
			began := time.Now()
			s.do(b, tc.path, key)
			*mine = append(*mine, time.Since(began))
		}
		b.ReportAllocs()
		b.ResetTimer()
		began := time.Now()
		if clients == 1 {
			for b.Loop() {
				one(&lat)
			}
		} else {
			b.SetParallelism(max(1, clients/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					one(&mine)
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
		}
		elapsed := time.Since(began)
		b.StopTimer()
		n := float64(len(lat))
		b.ReportMetric(n/elapsed.Seconds(), "req/s")
		b.ReportMetric(float64(trips)/calibrate, "trips/op")
		b.ReportMetric(float64(commits)/calibrate, "commits/op")
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	})
}

// BenchmarkMiddleware measures what idemecho does around the engine for a
// keyed request, without a database: the middleware (key, scope, body,
// fingerprint, context) and a handler that renders its response and writes
// it as generated code does. The request and recorder of net/http/httptest
// are counted too (about 20 allocations of the total).
func BenchmarkMiddleware(b *testing.B) {
	rt := &idemecho.Runtime{Principal: func(echo.Context) (string, error) { return "acct", nil }}
	spec := &idemecho.Spec{Operation: &idem.Operation{ID: "createPayment"}, Key: idemhttp.KeyRule{Required: true},
		Scope: idemtype.Scope{Kind: idemtype.ScopePrincipal}, Route: "/payments", Exclude: []string{"/client_ts"}}
	e := echo.New()
	e.POST("/payments", func(c echo.Context) error {
		resp, err := idemecho.Render(func(w http.ResponseWriter) error {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(201)
			_, err := io.WriteString(w, `{"id":1042,"status":"succeeded"}`+"\n")
			return err
		})
		if err != nil {
			return err
		}
		return idemecho.Writer(c.Request().Context(), resp)(c.Response())
	}, idemecho.Middleware(rt, spec))
	body := `{"amount":1250,"currency":"EUR","customer":"ada@example.com","client_ts":"2026-11-30T18:35:13.123Z"}`
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("POST", "/payments", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "5f0c3f4e-1b7a-4d52-9a36-0c2b9f1d7e21")
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != 201 {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
}
