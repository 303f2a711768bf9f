package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
)

// config is one run's sizes and durations.
type config struct {
	sizes   []int         // table sizes at which claim latency is measured
	expired int           // expired records the pruner deletes
	clients int           // concurrent clients claiming
	rate    int           // claims a second offered while the pruner runs
	window  time.Duration // each latency measurement
	batch   int           // the pruner's batch size
	rounds  int           // prune rounds, their claims pooled
	rest    float64       // the pruner's rest after each batch, a multiple of its time (idemadmin.PruneOptions.Rest)
	sweep   []int         // client counts of the saturation sweep
	held    int           // executions held open while their leases are refreshed
	lease   time.Duration // their lease (refreshed every third of it)
	hold    time.Duration // how long each is held
	// fillfactor, when not 0, replaces the table's (set by the migrations)
	// before anything is written, to compare settings.
	fillfactor int
}

func defaults() config {
	return config{
		sizes:   []int{0, 1_000_000, 5_000_000},
		expired: 1_000_000,
		clients: 4,
		rate:    1000,
		window:  10 * time.Second,
		// The pruner at the pace it runs beside claims.
		batch:  idemadmin.PruneBesideClaims.Batch,
		rest:   idemadmin.PruneBesideClaims.Rest,
		rounds: 3,
		sweep:  []int{1, 2, 4, 8, 16, 32, 64},
		held:   200,
		lease:  1500 * time.Millisecond,
		hold:   2200 * time.Millisecond,
	}
}

// latency is one claim measurement.
type latency struct {
	Records  int64 // in the table when it started
	Clients  int
	Claims   int
	PerSec   float64
	P50, P99 time.Duration
}

// pruneFigure is figure 2.
type pruneFigure struct {
	Deleted        int64
	Elapsed        time.Duration
	PerSec         float64
	Before, During latency // claims before the prune started, and while it ran
	P99Ratio       float64
	Batch          int
	Rest           float64 // the pruner's rest after each batch (idemadmin.PruneOptions.Rest)
	Rounds         int     // prune rounds pooled (each loads cfg.expired records)
	Rate           int     // claims a second offered before and during the prune
}

// sizeFigure is figure 3, in bytes per record.
type sizeFigure struct {
	Records int64
	Total   float64 // table (heap, TOAST, free space and visibility maps) and indexes, per record
	Table   float64
	Indexes []indexSize
	Row     float64 // pg_column_size of the whole row
	Body    float64 // pg_column_size(response_body)
	Headers float64 // pg_column_size(response_headers)
	State   float64 // pg_column_size(phase_state)
	Key     float64 // key, scope and namespace
	// BeyondBody is Total less the stored body: the figure of issue 12.
	BeyondBody float64
	Fillfactor string
}

type indexSize struct {
	Name      string
	PerRecord float64
}

// indexSizes returns the sizes of table's indexes per record of its n,
// largest first, each with all its forks (a BRIN index has a free space
// map, which pg_total_relation_size counts).
func indexSizes(ctx context.Context, conn *pgx.Conn, table string, n int64) ([]indexSize, error) {
	rows, err := conn.Query(ctx, `SELECT c.relname, pg_table_size(c.oid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1::regclass ORDER BY pg_table_size(c.oid) DESC, c.relname`, table)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (indexSize, error) {
		var ix indexSize
		var size int64
		err := row.Scan(&ix.Name, &size)
		ix.PerRecord = float64(size) / float64(n)
		return ix, err
	})
}

// hotFigure is figure 4.
type hotFigure struct {
	Refreshes  int64 // refresh statements that matched their record, counted by the client
	Updates    int64 // n_tup_upd over the same time
	HOT        int64 // n_tup_hot_upd over the same time
	Fillfactor string
}

// report is what run measured.
type report struct {
	Server string
	Claims []latency
	Size   sizeFigure
	Sweep  []latency
	Prune  pruneFigure
	HOT    hotFigure
}

const schema = "storebench"

// retention is the bench operation's: records expire a day after they
// complete, as by default.
const retention = 24 * time.Hour

// bench holds what the measurements share.
type bench struct {
	cfg    config
	w      io.Writer
	url    string
	admin  *pgx.Conn
	pool   *pgxpool.Pool
	eng    *idem.Engine
	op     *idem.Operation
	seq    atomic.Int64 // numbers the engine's requests
	loaded int64        // live records loaded so far
	// A record loaded and one the engine wrote (their ids), for checkShape.
	loadedKey string
	engineKey atomic.Value
	t0        time.Time // the database's clock when the run started
}

func run(ctx context.Context, url string, cfg config, w io.Writer) (*report, error) {
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.Background())
	b := &bench{cfg: cfg, w: w, url: url, admin: admin,
		op: &idem.Operation{ID: "createPayment", Policy: idem.Policy{Retention: retention}}}
	if err := admin.QueryRow(ctx, `SELECT now()`).Scan(&b.t0); err != nil {
		return nil, err
	}
	rep := &report{}
	if rep.Server, err = b.server(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "storebench: %s\n", rep.Server)
	fmt.Fprintf(w, "machine: %d CPUs, load average %s\n", runtime.NumCPU(), loadAverage())
	if err := b.open(ctx, nil); err != nil {
		return nil, err
	}
	defer func() { b.pool.Close() }()
	if _, err := idemmigrate.New(b.pool, schema).Up(ctx); err != nil {
		return nil, err
	}
	if cfg.fillfactor != 0 {
		if _, err := admin.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s.records SET (fillfactor = %d)`, schema, cfg.fillfactor)); err != nil {
			return nil, err
		}
	}

	fmt.Fprintf(w, "\n1. claim latency by table size: %d clients for %v each; a claim is a single-phase request on a new key (claim, stored response, one commit)\n",
		cfg.clients, cfg.window)
	for _, size := range cfg.sizes {
		if err := b.loadLive(ctx, int64(size)); err != nil {
			return nil, err
		}
		l, err := b.measure(ctx, cfg.clients, cfg.window)
		if err != nil {
			return nil, err
		}
		rep.Claims = append(rep.Claims, l)
		fmt.Fprintf(w, "   %s\n", l)
		if b.loaded > 0 {
			if err := b.checkShape(ctx); err != nil {
				return nil, err
			}
		}
	}

	if rep.Size, err = b.sizes(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "\n3. bytes per record:\n%s", rep.Size.detail())

	if len(cfg.sweep) > 0 {
		fmt.Fprintf(w, "\nsaturation: claims/s by clients, %v each, %s records\n", cfg.window, count(b.records(ctx)))
		for _, c := range cfg.sweep {
			l, err := b.measure(ctx, c, cfg.window)
			if err != nil {
				return nil, err
			}
			rep.Sweep = append(rep.Sweep, l)
			fmt.Fprintf(w, "   %s\n", l)
		}
	}

	fmt.Fprintf(w, "\n2. prune while claims continue, offered at %d a second:\n", cfg.rate)
	if rep.Prune, err = b.prune(ctx, w); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "   %s\n", rep.Prune)

	fmt.Fprintf(w, "\n4. lease refreshes: %d executions held %v with a %v lease (refreshed every %v), beside %d clients claiming\n",
		cfg.held, cfg.hold, cfg.lease, cfg.lease/3, cfg.clients)
	if rep.HOT, err = b.hot(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "   %s\n", rep.HOT)

	fmt.Fprintf(w, "\nthe four figures (load average now %s):\n", loadAverage())
	for _, l := range rep.Claims {
		fmt.Fprintf(w, "1. %s\n", l)
	}
	fmt.Fprintf(w, "2. %s\n", rep.Prune)
	fmt.Fprintf(w, "3. %s\n", rep.Size)
	fmt.Fprintf(w, "4. %s\n", rep.HOT)
	return rep, nil
}

// server describes the database and the settings that decide its figures.
func (b *bench) server(ctx context.Context) (string, error) {
	var version string
	if err := b.admin.QueryRow(ctx, `SHOW server_version`).Scan(&version); err != nil {
		return "", err
	}
	parts := []string{"PostgreSQL " + strings.Fields(version)[0]}
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "max_wal_size", "wal_compression"} {
		var v string
		if err := b.admin.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&v); err != nil {
			return "", err
		}
		parts = append(parts, name+"="+v)
	}
	return strings.Join(parts, " "), nil
}

// open makes the engine's pool, with tracer on its connections.
func (b *bench) open(ctx context.Context, tracer pgx.QueryTracer) error {
	cfg, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		return err
	}
	// Every client may hold a connection; the held executions need one
	// only to claim, refresh and finish, and share the rest.
	cfg.MaxConns = int32(max(b.cfg.clients, slices.Max(append([]int{1}, b.cfg.sweep...))) + 16)
	cfg.ConnConfig.Tracer = tracer
	if b.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	b.eng, err = idem.New(b.pool, idem.Options{Schema: schema})
	return err
}

// benchState is the phase state the bench's operation stores.
type benchState struct {
	PaymentID int64 `json:"payment_id"`
}

// number numbers a record: loaded ones from 10,000,000, the engine's from
// 20,000,000, so that both have eight digits in their body, headers and
// state, and a loaded record is the size of one the engine wrote.
const (
	loadedBase = 10_000_000
	engineBase = 20_000_000
)

// request runs one single-phase request on a new key: the claim and the
// stored response, in one transaction.
func (b *bench) request(ctx context.Context) error {
	n := engineBase + b.seq.Add(1)
	body := fmt.Appendf(nil, `{"id":%d,"status":"succeeded"}`, n)
	fp := sha256.Sum256(body)
	req := idem.KeyedRequest{Scope: fmt.Sprintf("acct_%04d", rand.IntN(5000)), Key: idemclient.NewKey(), Fingerprint: fp[:]}
	_, err := idem.Run(ctx, b.eng, b.op, req, []idem.Phase[benchState]{{Name: "finish",
		Final: func(ctx context.Context, tx pgx.Tx, s *benchState) (*idem.Response, error) {
			s.PaymentID = n
			return &idem.Response{Status: http.StatusCreated, Body: body, Header: http.Header{
				"Content-Type": {"application/json"}, "Location": {fmt.Sprintf("/payments/%d", n)}}}, nil
		}}})
	if err == nil {
		b.engineKey.Store([2]string{req.Scope, req.Key})
	}
	return err
}

// sample is one request's start and end.
type sample struct{ start, end time.Time }

// claimLoad runs clients goroutines of requests until stop is closed and
// returns their samples, or the first error.
func (b *bench) claimLoad(ctx context.Context, clients int, stop <-chan struct{}) ([]sample, error) {
	var mu sync.Mutex
	var all []sample
	var firstErr error
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []sample
			defer func() {
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				start := time.Now()
				if err := b.request(ctx); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				mine = append(mine, sample{start, time.Now()})
			}
		}()
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return all, firstErr
}

// claimsAt offers claims at rate a second, from as many goroutines as
// they need, until stop is closed, and returns their samples. A sample
// starts when its claim was due, not when a goroutine got to it, so that a
// store that stalls is charged for the claims that queued behind it.
func (b *bench) claimsAt(ctx context.Context, rate int, stop <-chan struct{}) ([]sample, error) {
	due := make(chan time.Time, 4096)
	var mu sync.Mutex
	var all []sample
	var firstErr error
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for at := range due {
				err := b.request(ctx)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				all = append(all, sample{at, time.Now()})
				mu.Unlock()
			}
		}()
	}
	interval := time.Second / time.Duration(rate)
	next := time.Now()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
offer:
	for {
		select {
		case <-stop:
			break offer
		case <-ctx.Done():
			break offer
		case now := <-tick.C:
			for ; !next.After(now); next = next.Add(interval) {
				due <- next
			}
		}
	}
	close(due)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return all, firstErr
}

// measure runs clients for d and summarises their claims.
func (b *bench) measure(ctx context.Context, clients int, d time.Duration) (latency, error) {
	records := b.records(ctx)
	stop := make(chan struct{})
	timer := time.AfterFunc(d, func() { close(stop) })
	defer timer.Stop()
	samples, err := b.claimLoad(ctx, clients, stop)
	if err != nil {
		return latency{}, err
	}
	l := summarise(samples, d)
	l.Records, l.Clients = records, clients
	return l, nil
}

func summarise(samples []sample, d time.Duration) latency {
	durs := make([]time.Duration, len(samples))
	for i, s := range samples {
		durs[i] = s.end.Sub(s.start)
	}
	slices.Sort(durs)
	l := latency{Claims: len(durs)}
	if len(durs) > 0 {
		l.P50 = durs[len(durs)*50/100]
		l.P99 = durs[min(len(durs)*99/100, len(durs)-1)]
	}
	if d > 0 {
		l.PerSec = float64(len(durs)) / d.Seconds()
	}
	return l
}

func (l latency) String() string {
	clients := "clients"
	if l.Clients == 1 {
		clients = "client"
	}
	return fmt.Sprintf("%s records, %d %s: p50 %s, p99 %s, %s claims/s (%s claims)",
		count(l.Records), l.Clients, clients, ms(l.P50), ms(l.P99), count(int64(l.PerSec)), count(int64(l.Claims)))
}

// records estimates the table's rows (the planner's count, exact after
// the loads' ANALYZE; a count(*) of millions of rows would take seconds).
func (b *bench) records(ctx context.Context) int64 {
	var n int64
	b.admin.QueryRow(ctx, `SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = $1::regclass`, schema+".records").Scan(&n)
	return n
}

// loadSQL inserts records number $1..$2 as the engine would have stored
// them for the bench's operation: completed at $3 + (g-$1) * $4
// microseconds ($3 NULL: the statement's start), with a scope among 5,000
// and a UUIDv7 key of that time, to a fraction of a millisecond, as
// runtime/idemclient makes them. A completed record keeps its id, the
// receipt's fingerprint, the response (its two headers coded: Content-Type,
// HPACK's 31, and Location, 46, each with its value's length) and its
// expiry (migration 005). It returns the smallest id it inserted.
//
// Live records complete as they are loaded: records that complete over a
// day arrive in the order of their keys and of expires_at, after every
// record already there, and so must loaded ones, or each would land in
// the middle of the indexes, where a full page splits in half.
const loadSQL = `WITH ins AS (INSERT INTO ` + schema + `.records (id, fingerprint, response_status, response_headers,
    response_body, created_at, attempts, key_derivation, background, recovery_point, expires_at)
SELECT ` + schema + `.record_id('createPayment', 'acct_' || lpad((g % 5000)::text, 4, '0'),
        (lpad(to_hex(us / 1000), 12, '0') || '7' || lpad(to_hex((us % 1000) * 4096 / 1000), 3, '0') || '8' || substr(h, 1, 15))::uuid::text),
    ` + schema + `.receipt_fingerprint('createPayment', sha256(int8send(g))), 201,
    '\x1f10'::bytea || convert_to('application/json', 'UTF8') || '\x2e'::bytea
        || set_byte('\x00'::bytea, 0, length('/payments/' || g)) || convert_to('/payments/' || g, 'UTF8'),
    convert_to('{"id":' || g || ',"status":"succeeded"}', 'UTF8'),
    NULL, NULL, NULL, NULL, NULL, c + $5::bigint * interval '1 microsecond'
FROM generate_series($1::bigint, $2::bigint) AS g,
    LATERAL (SELECT coalesce($3::timestamptz, statement_timestamp()) + (g - $1) * $4::bigint * interval '1 microsecond' AS c,
        md5(g::text) AS h) AS t,
    LATERAL (SELECT (extract(epoch FROM c) * 1000000)::bigint AS us) AS k
RETURNING id)
SELECT min(id::text) FROM ins`

// load inserts records from..to (numbers) in chunks, showing progress,
// completed step apart from start (nil: each chunk from the time it is
// inserted), then vacuums and checkpoints so that the next measurement
// starts from a settled table. It returns the smallest key of the first
// chunk.
func (b *bench) load(ctx context.Context, what string, from, to int64, start *time.Time, step time.Duration) (string, error) {
	total := to - from + 1
	if total <= 0 {
		return "", nil
	}
	chunk := max(min(total/10, 250_000), 1)
	began := time.Now()
	var first string
	for lo := from; lo <= to; lo += chunk {
		hi := min(lo+chunk-1, to)
		var at *time.Time
		if start != nil {
			t := start.Add(time.Duration(lo-from) * step)
			at = &t
		}
		var key string
		if err := b.admin.QueryRow(ctx, loadSQL, lo, hi, at, step.Microseconds(), retention.Microseconds()).Scan(&key); err != nil {
			return "", fmt.Errorf("loading %s: %w", what, err)
		}
		if first == "" {
			first = key
		}
		done := hi - from + 1
		fmt.Fprintf(b.w, "   loading %s: %s of %s (%d%%), %s records/s\n", what, count(done), count(total),
			done*100/total, count(int64(float64(done)/time.Since(began).Seconds())))
	}
	vac := time.Now()
	if _, err := b.admin.Exec(ctx, `VACUUM (ANALYZE) `+schema+`.records`); err != nil {
		return "", err
	}
	if _, err := b.admin.Exec(ctx, `CHECKPOINT`); err != nil {
		return "", err
	}
	fmt.Fprintf(b.w, "   loaded %s in %s; VACUUM (ANALYZE) and CHECKPOINT %s\n", count(total), secs(vac.Sub(began)), secs(time.Since(vac)))
	return first, nil
}

// loadLive brings the live records loaded so far to size.
func (b *bench) loadLive(ctx context.Context, size int64) error {
	if size <= b.loaded {
		return nil
	}
	key, err := b.load(ctx, "live records", loadedBase+b.loaded+1, loadedBase+size, nil, time.Microsecond)
	if err != nil {
		return err
	}
	if b.loadedKey == "" {
		b.loadedKey = key
	}
	b.loaded = size
	return nil
}

// checkShape refuses to report sizes of loaded records that differ from
// the engine's own: the bench's figures are only as good as its loader.
func (b *bench) checkShape(ctx context.Context) error {
	engineKey, _ := b.engineKey.Load().([2]string)
	var loaded, engine int
	q := `SELECT pg_column_size(r.*) FROM ` + schema + `.records r WHERE id = $1::uuid`
	if err := b.admin.QueryRow(ctx, q, b.loadedKey).Scan(&loaded); err != nil {
		return fmt.Errorf("reading a loaded record: %w", err)
	}
	q = `SELECT pg_column_size(r.*) FROM ` + schema + `.records r WHERE id = ` + schema + `.record_id('createPayment', $1, $2)`
	if err := b.admin.QueryRow(ctx, q, engineKey[0], engineKey[1]).Scan(&engine); err != nil {
		return fmt.Errorf("reading a record the engine wrote: %w", err)
	}
	if loaded != engine {
		return fmt.Errorf("a loaded record is %d bytes and one the engine wrote %d: loadSQL no longer writes what the engine does", loaded, engine)
	}
	return nil
}

// sizes measures figure 3 on the table as it stands.
func (b *bench) sizes(ctx context.Context) (sizeFigure, error) {
	var f sizeFigure
	var table, body, headers, state, row, key float64
	err := b.admin.QueryRow(ctx, `SELECT count(*), pg_table_size($1::regclass), avg(pg_column_size(r.*)), avg(pg_column_size(response_body)),
    avg(coalesce(pg_column_size(response_headers), 0)), avg(coalesce(pg_column_size(phase_state), 0)),
    coalesce(avg(pg_column_size(key) + pg_column_size(scope) + pg_column_size(namespace)), 0),
    coalesce((SELECT option_value FROM pg_options_to_table((SELECT reloptions FROM pg_class WHERE oid = $1::regclass)) WHERE option_name = 'fillfactor'), '100')
FROM `+schema+`.records r`, schema+".records").Scan(&f.Records, &table, &row, &body, &headers, &state, &key, &f.Fillfactor)
	if err != nil {
		return f, err
	}
	if f.Records == 0 {
		return f, errors.New("no records to measure")
	}
	indexes, err := indexSizes(ctx, b.admin, schema+".records", f.Records)
	if err != nil {
		return f, err
	}
	n := float64(f.Records)
	f.Table = table / n
	f.Total = f.Table
	for _, ix := range indexes {
		f.Indexes = append(f.Indexes, ix)
		f.Total += ix.PerRecord
	}
	f.Row, f.Body, f.Headers, f.State, f.Key = row, body, headers, state, key
	f.BeyondBody = f.Total - f.Body
	return f, nil
}

func (f sizeFigure) String() string {
	return fmt.Sprintf("bytes per record, %s records: %.0f in all, %.0f beyond the stored body (%.0f); beyond body, headers and phase state %.0f",
		count(f.Records), f.Total, f.BeyondBody, f.Body, f.Total-f.Body-f.Headers-f.State)
}

func (f sizeFigure) detail() string {
	var s strings.Builder
	fmt.Fprintf(&s, "   %s\n", f)
	fmt.Fprintf(&s, "   table %.0f (fillfactor %s)", f.Table, f.Fillfactor)
	for _, ix := range f.Indexes {
		fmt.Fprintf(&s, ", %s %.0f", ix.Name, ix.PerRecord)
	}
	fmt.Fprintf(&s, "\n   pg_column_size: row %.0f, of which key+scope+namespace %.0f, response body %.0f, headers %.0f, phase state %.0f\n",
		f.Row, f.Key, f.Body, f.Headers, f.State)
	return s.String()
}

// prune runs the prune rounds and pools their claims: a window's p99 is
// its few slowest claims, and one stall of the disk in a 10 s window moves
// it by milliseconds, so one round alone says little.
func (b *bench) prune(ctx context.Context, w io.Writer) (pruneFigure, error) {
	f := pruneFigure{Batch: b.cfg.batch, Rest: b.cfg.rest, Rate: b.cfg.rate, Rounds: b.cfg.rounds}
	var before, during []sample
	var beforeTime time.Duration
	for r := range b.cfg.rounds {
		rf, bs, ds, bt, err := b.pruneRound(ctx, r)
		if err != nil {
			return f, err
		}
		fmt.Fprintf(w, "   round %d: %s\n", r+1, rf)
		f.Deleted += rf.Deleted
		f.Elapsed += rf.Elapsed
		before, during = append(before, bs...), append(during, ds...)
		beforeTime += bt
	}
	f.summarise(before, beforeTime, during)
	return f, nil
}

// summarise fills in the rates and latencies of f from its Deleted and
// Elapsed and the claims before (over beforeTime) and during the prune.
func (f *pruneFigure) summarise(before []sample, beforeTime time.Duration, during []sample) {
	f.PerSec = float64(f.Deleted) / f.Elapsed.Seconds()
	f.Before, f.During = summarise(before, beforeTime), summarise(during, f.Elapsed)
	if f.Before.P99 > 0 {
		f.P99Ratio = float64(f.During.P99) / float64(f.Before.P99)
	}
}

// pruneRound loads expired records, runs claims for a window, then prunes
// while the claims continue. It returns the round's figure, its claims
// before and during the prune, and how long the claims ran before it.
func (b *bench) pruneRound(ctx context.Context, round int) (f pruneFigure, before, during []sample, beforeTime time.Duration, err error) {
	f = pruneFigure{Batch: b.cfg.batch, Rest: b.cfg.rest, Rate: b.cfg.rate, Rounds: 1}
	// Expired a day after they completed, within the hour before the run.
	// Their keys and expires_at are older than any live record's, so they
	// land at the start of both indexes, half filling the pages there:
	// that makes the pruner's walk longer, not shorter.
	start := b.t0.Add(-retention - time.Hour)
	first := loadedBase + b.loaded + int64(round*b.cfg.expired) + 1
	if _, err := b.load(ctx, "expired records", first, first+int64(b.cfg.expired)-1,
		&start, time.Hour/time.Duration(max(b.cfg.expired, 1))); err != nil {
		return f, nil, nil, 0, err
	}
	var live int64
	if err := b.admin.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.records WHERE expires_at > now()`).Scan(&live); err != nil {
		return f, nil, nil, 0, err
	}
	stop := make(chan struct{})
	type result struct {
		samples []sample
		err     error
	}
	done := make(chan result, 1)
	go func() {
		s, err := b.claimsAt(ctx, b.cfg.rate, stop)
		done <- result{s, err}
	}()
	began := time.Now()
	select {
	case <-time.After(b.cfg.window):
	case <-ctx.Done():
	}
	pruneStart := time.Now()
	n, perr := idemadmin.Prune(ctx, b.eng, idemadmin.PruneOptions{Batch: b.cfg.batch, Rest: b.cfg.rest})
	pruneEnd := time.Now()
	close(stop)
	res := <-done
	if perr != nil {
		return f, nil, nil, 0, perr
	}
	if res.err != nil {
		return f, nil, nil, 0, res.err
	}
	for _, s := range res.samples {
		switch {
		case s.end.Before(pruneStart):
			before = append(before, s)
		case s.start.Before(pruneEnd) && s.end.After(pruneStart):
			during = append(during, s)
		}
	}
	f.Deleted, f.Elapsed = n, pruneEnd.Sub(pruneStart)
	beforeTime = pruneStart.Sub(began)
	f.summarise(before, beforeTime, during)
	// Nothing live may have gone: the live records and every claim made
	// since remain.
	var remaining int64
	if err := b.admin.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.records`).Scan(&remaining); err != nil {
		return f, nil, nil, 0, err
	}
	if want := live + int64(len(res.samples)); remaining < want {
		return f, nil, nil, 0, fmt.Errorf("the pruner deleted live records: %d remain, want at least %d", remaining, want)
	}
	return f, before, during, beforeTime, nil
}

func (f pruneFigure) String() string {
	rounds := ""
	if f.Rounds > 1 {
		rounds = fmt.Sprintf(" in %d rounds", f.Rounds)
	}
	return fmt.Sprintf("prune: %s expired records deleted%s in %s = %s records/s (batch %d, rest %g) while claims arrived at %s/s; claim p99 %s during against %s before (p50 %s against %s): %.2fx",
		count(f.Deleted), rounds, secs(f.Elapsed), count(int64(f.PerSec)), f.Batch, f.Rest, count(int64(f.Rate)), ms(f.During.P99), ms(f.Before.P99),
		ms(f.During.P50), ms(f.Before.P50), f.P99Ratio)
}

// refreshCounter counts the lease refreshes that matched their record.
type refreshCounter struct {
	prefix string
	n      atomic.Int64
}

type isRefresh struct{}

func (r *refreshCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	// The statement as runtime/idem/sql/execution.sql's Refresh writes it,
	// its white space aside.
	if strings.HasPrefix(strings.Join(strings.Fields(d.SQL), " "), r.prefix) {
		return context.WithValue(ctx, isRefresh{}, true)
	}
	return ctx
}

func (r *refreshCounter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if ctx.Value(isRefresh{}) != nil && d.Err == nil && d.CommandTag.RowsAffected() == 1 {
		r.n.Add(1)
	}
}

// hot holds executions open long enough for their leases to be refreshed,
// beside claims that fill the table's pages around them, and reads the
// table's update counters before and after. Only a refresh can be a HOT
// update here: every other update of a record moves expires_at, which is
// indexed.
func (b *bench) hot(ctx context.Context) (hotFigure, error) {
	f := hotFigure{}
	before, err := b.updateCounters(ctx)
	if err != nil {
		return f, err
	}
	counter := &refreshCounter{prefix: `UPDATE ` + schema + `.records SET lease_until = GREATEST(`}
	if err := b.open(ctx, counter); err != nil {
		return f, err
	}
	held := &idem.Operation{ID: "holdPayment", Policy: idem.Policy{Lease: b.cfg.lease, Retention: retention}}
	stop := make(chan struct{})
	loadDone := make(chan error, 1)
	go func() {
		_, err := b.claimLoad(ctx, b.cfg.clients, stop)
		loadDone <- err
	}()
	var wg sync.WaitGroup
	errs := make(chan error, b.cfg.held)
	for i := range b.cfg.held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fp := sha256.Sum256([]byte{byte(i)})
			req := idem.KeyedRequest{Scope: fmt.Sprintf("acct_%04d", rand.IntN(5000)), Key: idemclient.NewKey(), Fingerprint: fp[:]}
			// The first phase is foreign: the claim commits alone, and the
			// lease is refreshed while the phase waits.
			_, err := idem.Run(ctx, b.eng, held, req, []idem.Phase[benchState]{
				{Name: "wait", Foreign: func(ctx context.Context, _ string, _ *benchState) error {
					select {
					case <-time.After(b.cfg.hold):
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}},
				{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *benchState) (*idem.Response, error) {
					return &idem.Response{Status: http.StatusCreated, Body: []byte(`{}`)}, nil
				}},
			})
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(stop)
	if err := <-loadDone; err != nil {
		return f, err
	}
	close(errs)
	if err := <-errs; err != nil {
		return f, fmt.Errorf("a held execution: %w", err)
	}
	after, err := b.updateCounters(ctx)
	if err != nil {
		return f, err
	}
	f.Refreshes = counter.n.Load()
	f.Updates, f.HOT = after[0]-before[0], after[1]-before[1]
	if err := b.admin.QueryRow(ctx, `SELECT coalesce((SELECT option_value FROM pg_options_to_table(reloptions) WHERE option_name = 'fillfactor'), '100')
FROM pg_class WHERE oid = $1::regclass`, schema+".records").Scan(&f.Fillfactor); err != nil {
		return f, err
	}
	return f, nil
}

// updateCounters closes the engine's pool, waits until its sessions have
// ended (a session reports its counters when it ends) and returns the
// table's n_tup_upd and n_tup_hot_upd.
func (b *bench) updateCounters(ctx context.Context) ([2]int64, error) {
	b.pool.Close()
	var c [2]int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		var others int
		if err := b.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&others); err != nil {
			return c, err
		}
		if others == 0 {
			break
		}
		if time.Now().After(deadline) {
			return c, fmt.Errorf("%d sessions still open after the pool closed", others)
		}
		time.Sleep(20 * time.Millisecond)
	}
	err := b.admin.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = $1::regclass`,
		schema+".records").Scan(&c[0], &c[1])
	return c, err
}

func (f hotFigure) String() string {
	pct := 0.0
	if f.Refreshes > 0 {
		pct = 100 * float64(f.HOT) / float64(f.Refreshes)
	}
	return fmt.Sprintf("lease refreshes: %s refreshes, %s HOT updates (pg_stat_user_tables.n_tup_hot_upd): %.0f%%; %s updates in all, the others completions, which move expires_at (fillfactor %s)",
		count(f.Refreshes), count(f.HOT), pct, count(f.Updates), f.Fillfactor)
}

// loadAverage is the one-, five- and fifteen-minute load average.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// count writes n with thousands separators.
func count(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + count(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
