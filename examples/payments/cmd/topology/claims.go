package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/topology"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
)

// claimProbe is how many claims the lost-claims probe makes before it
// kills the primary.
const claimProbe = 100

// lostClaims measures what AsyncClaimCommit risks in a failover: on a fresh
// formation, claimProbe requests of an operation whose claim commits alone
// (its first phase is foreign) each reach their foreign phase, which is
// the engine saying its claim committed; wait after the last one does, the
// primary is killed, and the probe counts the claims missing on the
// promoted standby. Nothing else runs, so no later durable commit flushes
// the claims' WAL before the kill: only PostgreSQL's WAL writer does.
func lostClaims(ctx context.Context, c *cleanups, dir string, async bool, wait time.Duration) (int, error) {
	f, err := topology.StartFormation(ctx, dir, "claims")
	if err != nil {
		return 0, err
	}
	c.add(func() { f.Stop() })
	defer f.Stop()
	cfg, err := pgxpool.ParseConfig(f.URL())
	if err != nil {
		return 0, err
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	if _, err := idemmigrate.New(pool, idem.DefaultSchema).Up(ctx); err != nil {
		return 0, err
	}
	eng, err := idem.New(pool, idem.Options{AsyncClaimCommit: async})
	if err != nil {
		return 0, err
	}
	op := &idem.Operation{ID: "charge", Policy: idem.Policy{Lease: time.Minute}}
	fp := sha256.Sum256([]byte("body"))
	killed := make(chan struct{})
	claimed := make(chan struct{}, claimProbe)
	var wg sync.WaitGroup
	for i := range claimProbe {
		wg.Add(1)
		go func() {
			defer wg.Done()
			idem.Run(ctx, eng, op, idem.KeyedRequest{Scope: "probe", Key: fmt.Sprint(i), Fingerprint: fp[:]}, []idem.Phase[struct{}]{
				{Name: "charge", Foreign: func(context.Context, string, *struct{}) error {
					claimed <- struct{}{} // the claim committed
					<-killed
					return errors.New("the primary is gone")
				}},
				{Name: "finish", Final: func(context.Context, pgx.Tx, *struct{}) (*idem.Response, error) {
					return &idem.Response{Status: 201, Header: http.Header{}}, nil
				}},
			})
		}()
	}
	for range claimProbe {
		<-claimed
	}
	time.Sleep(wait)
	_, err = f.Fail(ctx)
	close(killed)
	wg.Wait()
	if err != nil {
		return 0, err
	}
	var present int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+idem.DefaultSchema+`.records`).Scan(&present); err != nil {
		return 0, err
	}
	return claimProbe - present, nil
}
