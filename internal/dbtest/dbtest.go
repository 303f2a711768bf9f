// Package dbtest is the database side of the public idemtest package, for
// the tests idemtest cannot serve: runtime/idem's internal tests (idemtest
// imports idem) and tests that need no engine. Its messages speak as
// idemtest, the name users see.
//
// It gives tests a real PostgreSQL: the server named by
// DATABASE_URL, or a throwaway cluster started from the local binaries. Each
// test package gets its own database and each Pool call its own schema, so
// tests never see each other's rows.
//
// Through a pooler in transaction mode (PgBouncer), set
// IDEMGEN_PG_POOLED=1 beside DATABASE_URL: a pooler refuses session
// settings in the startup packet (search_path) and would not keep one
// server connection per client anyway, so each Pool call then gets a
// database of its own whose search_path is set with ALTER DATABASE, which
// every server connection to it starts with.
package dbtest

import (
	"context"
	"fmt"
	neturl "net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/pglocal"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
)

// started is when the process started, in nanoseconds.
var started = time.Now().UnixNano()

var (
	once    sync.Once
	env     *pglocal.Env
	envErr  error
	schemas atomic.Int64
)

// Main runs the package's tests and exits. Call it from TestMain. The
// database is opened when a test first asks for it, not before: a run that
// needs none (a fuzz run with -run '^$', and each of its workers, which
// execute TestMain too) starts no cluster. When no database can be had,
// every test that asks for one fails saying how to fix it; none skips.
func Main(m *testing.M) {
	code := m.Run()
	if env != nil {
		env.Close()
	}
	os.Exit(code)
}

// opened opens the package's database once.
func opened() (*pglocal.Env, error) {
	once.Do(func() {
		// Benchmarks of commit paths set IDEMGEN_PG_DURABLE=1 so that fsync
		// and synchronous commit are on, as in production.
		opts := pglocal.Options{Durable: os.Getenv("IDEMGEN_PG_DURABLE") == "1"}
		env, envErr = pglocal.Open(context.Background(), "idemtest", opts)
		if envErr != nil {
			envErr = fmt.Errorf("idemtest: no PostgreSQL for the tests: %w\n"+
				"Fix: install the PostgreSQL server binaries (initdb, postgres), "+
				"or set DATABASE_URL to a server where this user may CREATE DATABASE", envErr)
		}
	})
	return env, envErr
}

// Env returns the package's database environment, opening it on first use.
// It panics when none can be had (the panic says how to fix it); tests
// should prefer Pool and URL, which fail the test instead.
func Env() *pglocal.Env {
	e, err := opened()
	if err != nil {
		panic(err.Error())
	}
	return e
}

// URL returns the package database's connection string, failing tb when
// there is no database.
func URL(tb testing.TB) string {
	tb.Helper()
	e, err := opened()
	if err != nil {
		tb.Fatal(err)
	}
	return e.URL
}

// Schema creates a new, empty schema and returns its name.
func Schema(tb testing.TB) string {
	tb.Helper()
	url := URL(tb)
	n := schemas.Add(1)
	name := fmt.Sprintf("t%d", n)
	if pglocal.Citus() {
		// One database for every test process: schemas apart by process,
		// and by when it started, since a later process of the run (a
		// test's child) may get the pid of an earlier one.
		name = fmt.Sprintf("t%d_%x_%d", os.Getpid(), started%0xfffff, n)
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		tb.Fatalf("idemtest: connect: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "CREATE SCHEMA "+name); err != nil {
		tb.Fatalf("idemtest: create schema: %v", err)
	}
	return name
}

// PooledEnv is the environment variable that says DATABASE_URL leads
// through a transaction-pooling pooler (see the package comment).
const PooledEnv = "IDEMGEN_PG_POOLED"

// Pooled reports whether the tests run through a pooler (PooledEnv=1).
func Pooled() bool { return os.Getenv(PooledEnv) == "1" }

// Pool returns a pool whose search_path is a new schema of its own, closed
// when the test ends.
func Pool(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	return PoolWith(tb, nil)
}

// PoolWith is Pool with configure applied to the pool's configuration
// (a query exec mode, an AfterConnect) before the pool opens.
func PoolWith(tb testing.TB, configure func(*pgxpool.Config)) (*pgxpool.Pool, string) {
	tb.Helper()
	if Pooled() {
		return pooledPool(tb, configure)
	}
	schema := Schema(tb)
	cfg, err := pgxpool.ParseConfig(URL(tb))
	if err != nil {
		tb.Fatalf("idemtest: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 32
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("idemtest: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool, schema
}

// pooledPool is Pool through a pooler: a database of its own, whose
// search_path names its one schema, dropped when the test ends.
func pooledPool(tb testing.TB, configure func(*pgxpool.Config)) (*pgxpool.Pool, string) {
	tb.Helper()
	pool, schema, _ := DatabasePool(tb, configure)
	return pool, schema
}

// DatabasePool is Pool on a database of its own, dropped when the test
// ends, whose search_path names its one schema; dsn is the database's
// connection string, for what the service runs on it itself (its
// migrations).
func DatabasePool(tb testing.TB, configure func(*pgxpool.Config)) (pool *pgxpool.Pool, schema, dsn string) {
	tb.Helper()
	ctx := context.Background()
	url := URL(tb)
	schema = fmt.Sprintf("t%d", schemas.Add(1))
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatalf("idemtest: %v", err)
	}
	db := cfg.ConnConfig.Database + "_" + schema
	if err := pglocal.CreateDatabase(ctx, url, db); err != nil {
		tb.Fatalf("idemtest: create database: %v", err)
	}
	tb.Cleanup(func() { pglocal.DropDatabase(context.Background(), url, db) })
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("idemtest: connect: %v", err)
	}
	_, err = conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" SET search_path = "+schema)
	conn.Close(ctx)
	if err != nil {
		tb.Fatalf("idemtest: %v", err)
	}
	cfg.ConnConfig.Database = db
	cfg.MaxConns = 32
	if configure != nil {
		configure(cfg)
	}
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("idemtest: %v", err)
	}
	tb.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		tb.Fatalf("idemtest: create schema: %v", err)
	}
	return pool, schema, withDatabase(url, db)
}

// withDatabase is dsn (a URL or keyword/value pairs) naming database db.
func withDatabase(dsn, db string) string {
	if u, err := neturl.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + db
		return u.String()
	}
	return dsn + " dbname=" + db
}

// PlacementEnv names the environment variable that lays the records
// table out by placement (idemmigrate's DistributeOptions) in every test
// database: its value is the placement column's type (text, bigint or
// uuid). On one PostgreSQL the column and the (placement, id) key are
// added; on Citus the table is distributed by it, co-located with a table
// of the schema distributed by the same type. The protocol suite then runs
// the placement layout's statements.
const PlacementEnv = "IDEMGEN_TEST_PLACEMENT"

// Placement is the placement column's type PlacementEnv asks for, or "".
func Placement() string { return os.Getenv(PlacementEnv) }

// Migrate brings schema's engine tables up to date on pool and, against a
// Citus coordinator (pglocal.CitusEnv), distributes the records table as
// a user of Citus does (idemmigrate's Distribute): the protocol suite then
// runs on shards. With PlacementEnv set, the records table is laid out by
// placement.
func Migrate(tb testing.TB, pool *pgxpool.Pool, schema string) {
	tb.Helper()
	MigratePlaced(tb, pool, schema, Placement())
}

// MigratePlaced is Migrate with the records table laid out by a placement
// column of type typ ("": as PlacementEnv says).
func MigratePlaced(tb testing.TB, pool *pgxpool.Pool, schema, typ string) {
	tb.Helper()
	ctx := context.Background()
	m := idemmigrate.New(pool, schema)
	if _, err := m.Up(ctx); err != nil {
		tb.Fatalf("idemtest: migrating the engine's tables: %v", err)
	}
	switch {
	case typ != "" && pglocal.Citus():
		// A table of the service's, distributed by the placement's type,
		// for the records to be co-located with.
		anchor := schema + ".tenants"
		if _, err := pool.Exec(ctx, "CREATE TABLE "+anchor+" (tenant "+typ+" PRIMARY KEY)"); err != nil {
			tb.Fatalf("idemtest: %v", err)
		}
		if _, err := pool.Exec(ctx, "SELECT create_distributed_table($1, 'tenant')", anchor); err != nil {
			tb.Fatalf("idemtest: %v", err)
		}
		if _, err := m.DistributeBy(ctx, idemmigrate.DistributeOptions{ColocateWith: anchor}); err != nil {
			tb.Fatalf("idemtest: %v", err)
		}
	case typ != "":
		if _, err := m.DistributeBy(ctx, idemmigrate.DistributeOptions{PlacementType: typ}); err != nil {
			tb.Fatalf("idemtest: %v", err)
		}
	case pglocal.Citus():
		if _, err := m.Distribute(ctx); err != nil {
			tb.Fatalf("idemtest: %v", err)
		}
	}
}

// NotPlaced ends a test that cannot apply to the placement layout
// (PlacementEnv), saying why: one that writes records by hand, with no
// placement, or pins the statements' text.
func NotPlaced(tb testing.TB, why string) {
	tb.Helper()
	if Placement() != "" {
		tb.Skip("does not apply to the placement layout: " + why)
	}
}

// NotOnCitus ends a test that cannot apply to a Citus distributed records
// table (pglocal.CitusEnv), saying why: one that pins what a single
// PostgreSQL does and Citus does otherwise by design (docs/scaling.md).
func NotOnCitus(tb testing.TB, why string) {
	tb.Helper()
	if pglocal.Citus() {
		tb.Skip("does not apply on Citus: " + why)
	}
}

// Citus reports whether the tests run against a Citus coordinator
// (pglocal.CitusEnv), where Migrate distributes the records table.
func Citus() bool { return pglocal.Citus() }
