package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
)

// With -render, storebench measures what replay.render saves and costs
// (docs/scaling.md, docs/performance.md): the bytes per record of an
// operation whose answers (1.2 KB, 100 KB) are stored byte for byte
// against one that stores its reference and renders its replays; and the
// latency of a replay of each, read from the record (cold: another
// process, or the cache off) and from the engine's replay cache, at 1 and
// 16 concurrent clients, the two modes interleaved round by round.
// `make bench-render` runs it.

// renderConfig sizes the -render measurement.
type renderConfig struct {
	records int           // completed records loaded per mode and size, for the bytes
	sizes   []int         // answer bodies, bytes
	clients []int         // concurrent replaying clients
	rounds  int           // interleaved rounds per case
	window  time.Duration // how long each round replays
}

func renderDefaults() renderConfig {
	return renderConfig{records: 2000, sizes: []int{1200, 100 << 10}, clients: []int{1, 16}, rounds: 5, window: 2 * time.Second}
}

// renderSize is one line of the bytes figure.
type renderSize struct {
	Body           int
	Stored, Render float64 // bytes per record: heap, TOAST and indexes of the records table
}

// replayCase is one line of the replay figure.
type replayCase struct {
	Body, Clients int
	Cached        bool
	// Median replay latency and replays a second, stored and rendered.
	StoredP50, RenderP50     time.Duration
	StoredRate, RenderRate   float64
	StoredRounds, RenderRnds int
}

// words make a report's lines: text that compresses as a real report's
// does, not noise.
var words = strings.Fields("account amount balance charge currency customer date description invoice item paid pending price quantity refund settled status tax total transfer")

// reportBody is a JSON answer of about n bytes: an id, a status and lines
// of words, as a render would marshal them from the rows it read.
func reportBody(id int64, status string, n int) []byte {
	b := make([]byte, 0, n+64)
	b = fmt.Appendf(b, `{"id":%d,"status":%q,"lines":[`, id, status)
	for i := 0; len(b) < n-40; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `"%d %s %s %s %d.%02d"`, i, words[(int(id)+i)%len(words)], words[(int(id)*7+i*3)%len(words)], words[(i*5)%len(words)], (int(id)*31+i*17)%10000, i%100)
	}
	return append(b, "]}"...)
}

const renderSchema = "storebench_render"

func runRender(ctx context.Context, url string, cfg renderConfig, w io.Writer) ([]renderSize, []replayCase, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, err
	}
	pc.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, nil, err
	}
	defer pool.Close()
	var sizes []renderSize
	var cases []replayCase
	fmt.Fprintf(w, "render: %d completed records per mode and size; replays in %d interleaved rounds of %v\n", cfg.records, cfg.rounds, cfg.window)
	for _, size := range cfg.sizes {
		line := renderSize{Body: size}
		engines := map[bool]map[bool]*idem.Engine{} // render -> cached -> engine
		for _, render := range []bool{false, true} {
			schema := fmt.Sprintf("%s_%d_%t", renderSchema, size, render)
			if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`); err != nil {
				return nil, nil, err
			}
			if _, err := idemmigrate.New(pool, schema).Up(ctx); err != nil {
				return nil, nil, err
			}
			if _, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.reports (id bigserial PRIMARY KEY, status text NOT NULL)`); err != nil {
				return nil, nil, err
			}
			engines[render] = map[bool]*idem.Engine{}
			for _, cached := range []bool{false, true} {
				opts := idem.Options{Schema: schema}
				if !cached {
					opts.ReplayCacheBytes = -1
				}
				eng, err := idem.New(pool, opts)
				if err != nil {
					return nil, nil, err
				}
				engines[render][cached] = eng
			}
			op := reportOp(render)
			for i := range cfg.records {
				if _, err := idem.Run(ctx, engines[render][false], op, replayRequest(i), reportPhases(schema, size)); err != nil {
					return nil, nil, fmt.Errorf("loading: %w", err)
				}
			}
			if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+schema+`.records`); err != nil {
				return nil, nil, err
			}
			var total int64
			if err := pool.QueryRow(ctx, `SELECT pg_total_relation_size('`+schema+`.records')`).Scan(&total); err != nil {
				return nil, nil, err
			}
			per := float64(total) / float64(cfg.records)
			if render {
				line.Render = per
			} else {
				line.Stored = per
			}
		}
		sizes = append(sizes, line)
		fmt.Fprintf(w, "  %6d-byte answer: %8.0f bytes per record stored, %6.0f rendered (%.1fx smaller)\n", size, line.Stored, line.Render, line.Stored/line.Render)

		for _, cached := range []bool{false, true} {
			for _, clients := range cfg.clients {
				c := replayCase{Body: size, Clients: clients, Cached: cached}
				var lat [2][]time.Duration
				var n [2]int
				var spent [2]time.Duration
				for r := range cfg.rounds {
					order := []bool{false, true}
					if r%2 == 1 {
						order = []bool{true, false}
					}
					for _, render := range order {
						schema := fmt.Sprintf("%s_%d_%t", renderSchema, size, render)
						l, err := replayRound(ctx, engines[render][cached], reportOp(render), reportPhases(schema, size), clients, cfg.records, cfg.window)
						if err != nil {
							return nil, nil, err
						}
						k := map[bool]int{false: 0, true: 1}[render]
						lat[k] = append(lat[k], l...)
						n[k] += len(l)
						spent[k] += cfg.window
					}
				}
				c.StoredP50, c.RenderP50 = median(lat[0]), median(lat[1])
				c.StoredRate, c.RenderRate = float64(n[0])/spent[0].Seconds(), float64(n[1])/spent[1].Seconds()
				cases = append(cases, c)
				where := "from the record"
				if cached {
					where = "from the cache "
				}
				fmt.Fprintf(w, "  %6d-byte answer, replay %s, %2d client(s): p50 stored %8v rendered %8v (%.2fx); %7.0f/s stored, %7.0f/s rendered\n",
					size, where, clients, c.StoredP50.Round(time.Microsecond), c.RenderP50.Round(time.Microsecond),
					float64(c.RenderP50)/float64(c.StoredP50), c.StoredRate, c.RenderRate)
			}
		}
	}
	return sizes, cases, nil
}

func reportOp(render bool) *idem.Operation {
	op := &idem.Operation{ID: "createReport", Policy: idem.Policy{MaxReplayBody: 1 << 20}}
	if render {
		op.Policy.Render = []string{"/id"}
	}
	return op
}

func replayRequest(i int) idem.KeyedRequest {
	key := fmt.Sprintf("report-%d", i)
	sum := sha256.Sum256([]byte(key))
	return idem.KeyedRequest{Key: key, Fingerprint: sum[:]}
}

// reportPhases create a report row and answer it; Render reads the row and
// answers it again.
func reportPhases(schema string, size int) []idem.Phase[struct{}] {
	table := pgx.Identifier{schema, "reports"}.Sanitize()
	return []idem.Phase[struct{}]{{
		Name: "create",
		Final: func(ctx context.Context, tx pgx.Tx, _ *struct{}) (*idem.Response, error) {
			var id int64
			if err := tx.QueryRow(ctx, `INSERT INTO `+table+` (status) VALUES ('ready') RETURNING id`).Scan(&id); err != nil {
				return nil, err
			}
			return &idem.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "Location": {fmt.Sprintf("/reports/%d", id)}}, Body: reportBody(id, "ready", size)}, nil
		},
		Render: func(ctx context.Context, tx pgx.Tx, ref idem.Reference) (*idem.Response, error) {
			id, err := ref.Int64("/id")
			if err != nil {
				return nil, err
			}
			var status string
			if err := tx.QueryRow(ctx, `SELECT status FROM `+table+` WHERE id = $1`, id).Scan(&status); err != nil {
				return nil, err
			}
			return &idem.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: reportBody(id, status, size)}, nil
		},
	}}
}

// replayRound replays completed keys from clients goroutines for window
// and returns each replay's latency.
func replayRound(ctx context.Context, eng *idem.Engine, op *idem.Operation, phases []idem.Phase[struct{}], clients, records int, window time.Duration) ([]time.Duration, error) {
	var mu sync.Mutex
	var all []time.Duration
	var firstErr error
	deadline := time.Now().Add(window)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for i := c; time.Now().Before(deadline); i++ {
				start := time.Now()
				out, err := idem.Run(ctx, eng, op, replayRequest(i%min(records, 100)), phases)
				if err == nil && !out.Replayed {
					err = fmt.Errorf("key %d executed again", i)
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(start))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return all, firstErr
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
