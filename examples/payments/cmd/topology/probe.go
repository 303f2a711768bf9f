package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
)

// probeResult is what the engine did through the pooler in one mode.
type probeResult struct {
	mode              string
	requests, failed  int
	byCode            map[string]int // failures by SQLSTATE (or "other")
	example           string         // one failure's message
	replays, executed int
}

func (r probeResult) String() string {
	var codes []string
	for c, n := range r.byCode {
		codes = append(codes, fmt.Sprintf("%s x%d", c, n))
	}
	sort.Strings(codes)
	s := fmt.Sprintf("pgx default_query_exec_mode=%s: %d of %d requests failed", r.mode, r.failed, r.requests)
	if r.failed > 0 {
		s += fmt.Sprintf(" (SQLSTATE %s), e.g. %q", strings.Join(codes, ", "), r.example)
	}
	return s + fmt.Sprintf("; %d executed, %d replayed\n", r.executed, r.replays)
}

// probe runs the engine through url with pgx's query-exec mode (pgx's
// default, cache_statement, when mode is ""): 16 goroutines, each with 40
// requests of which every fourth repeats the previous key, so that claims,
// phases, completions and replays all go through the pooler.
func probe(ctx context.Context, url, mode string) (probeResult, error) {
	res := probeResult{mode: mode, byCode: map[string]int{}}
	if mode == "" {
		res.mode = "cache_statement (pgx's default)"
	} else {
		url += "&default_query_exec_mode=" + mode
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return res, err
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	schema := "probe_" + strings.Fields(res.mode)[0] // probe_cache_statement, probe_cache_describe
	if _, err := idemmigrate.New(pool, schema).Up(ctx); err != nil {
		return res, fmt.Errorf("migrating through the pooler: %w", err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+schema+`.rows (key text NOT NULL)`); err != nil {
		return res, err
	}
	eng, err := idem.New(pool, idem.Options{Schema: schema})
	if err != nil {
		return res, err
	}
	op := &idem.Operation{ID: "probe"}
	fp := sha256.Sum256([]byte("body"))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				key := fmt.Sprintf("g%d-%d", g, i-i%4/3) // every fourth request repeats a key
				phases := []idem.Phase[struct{}]{
					{Name: "record", Local: func(ctx context.Context, tx pgx.Tx, _ *struct{}) error {
						_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.rows (key) VALUES ($1)`, key)
						return err
					}},
					{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, _ *struct{}) (*idem.Response, error) {
						var n int
						err := tx.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.rows WHERE key = $1`, key).Scan(&n)
						return &idem.Response{Status: 201, Header: http.Header{}, Body: []byte(fmt.Sprint(n))}, err
					}},
				}
				out, err := idem.Run(ctx, eng, op, idem.KeyedRequest{Scope: "probe", Key: key, Fingerprint: fp[:]}, phases)
				mu.Lock()
				res.requests++
				switch {
				case err != nil:
					res.failed++
					code := "other"
					var pgErr *pgconn.PgError
					if errors.As(err, &pgErr) {
						code = pgErr.Code
					}
					res.byCode[code]++
					if res.example == "" {
						res.example = err.Error()
					}
				case out.Replayed:
					res.replays++
				default:
					res.executed++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return res, nil
}
