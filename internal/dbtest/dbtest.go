// Package dbtest gives tests a real PostgreSQL: the server named by
// DATABASE_URL, or a throwaway cluster started from the local binaries. Each
// test package gets its own database and each Pool call its own schema, so
// tests never see each other's rows.
package dbtest

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/pglocal"
)

var (
	env     *pglocal.Env
	schemas atomic.Int64
)

// Main runs the package's tests against a fresh database and exits. Call it
// from TestMain. It fails the run, saying how to fix it, when no database can
// be had; it never skips.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	// Benchmarks of commit paths set IDEMGEN_PG_DURABLE=1 so that fsync and
	// synchronous commit are on, as in production.
	opts := pglocal.Options{Durable: os.Getenv("IDEMGEN_PG_DURABLE") == "1"}
	env, err = pglocal.Open(context.Background(), "idemtest", opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dbtest: no PostgreSQL for the tests: %v\n"+
			"Fix: install the PostgreSQL server binaries (initdb, postgres), or set DATABASE_URL to a server where this user may CREATE DATABASE.\n", err)
		return 1
	}
	defer env.Close()
	return m.Run()
}

// Env returns the package's database environment. Main must have run.
func Env() *pglocal.Env {
	if env == nil {
		panic("dbtest: call dbtest.Main from TestMain")
	}
	return env
}

// URL returns the package database's connection string.
func URL() string { return Env().URL }

// Schema creates a new, empty schema and returns its name.
func Schema(tb testing.TB) string {
	tb.Helper()
	name := fmt.Sprintf("t%d", schemas.Add(1))
	conn, err := pgx.Connect(context.Background(), URL())
	if err != nil {
		tb.Fatalf("dbtest: connect: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "CREATE SCHEMA "+name); err != nil {
		tb.Fatalf("dbtest: create schema: %v", err)
	}
	return name
}

// Pool returns a pool whose search_path is a new schema of its own, closed
// when the test ends.
func Pool(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	schema := Schema(tb)
	cfg, err := pgxpool.ParseConfig(URL())
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool, schema
}
