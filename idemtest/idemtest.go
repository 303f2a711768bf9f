// Package idemtest tests phases against a real PostgreSQL: Check runs an
// operation's phases through crashes at every recovery point, around every
// foreign call, a takeover, concurrent duplicates and bursts under
// different keys, and compares each with a clean execution (see Check and
// docs/testing.md); New gives a test a migrated idem engine on a throwaway
// database of its own.
//
// Call Main from TestMain: the package's tests then run against a database
// of their own, on the server named by DATABASE_URL (whose user may CREATE
// DATABASE) or, when it is unset, on a throwaway cluster started from the
// local PostgreSQL server binaries (initdb, postgres; see package pglocal).
// Each call of New or Pool gets a schema of its own, so tests running in
// parallel never see each other's rows; everything New and Pool open is
// closed by tb.Cleanup. The database is opened when a test first asks for
// it, so a run that needs none (a fuzz run, say) starts no cluster. When no
// database can be had, each test that asks for one fails saying how to fix
// it: none skips.
//
//	func TestMain(m *testing.M) { idemtest.Main(m) }
//
//	func TestCreatePayment(t *testing.T) {
//		env := idemtest.New(t, idem.Options{})
//		if err := api.Migrate(ctx, env.Pool); err != nil { // the service's own tables, in env.Schema
//			t.Fatal(err)
//		}
//		... // idem.Run(ctx, env.Engine, op, req, phases), or the generated handlers on env.Engine
//	}
//
// IDEMGEN_PG_DURABLE=1 keeps fsync on in the throwaway cluster (for
// benchmarks of commit paths). With a transaction-pooling pooler (PgBouncer)
// in DATABASE_URL, set IDEMGEN_PG_POOLED=1: each call then gets a database
// of its own, since a pooler refuses search_path as a startup setting.
package idemtest

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idem"
)

// Main runs the package's tests, removes the database they used (if any
// asked for one), and exits with the tests' status. Call it from TestMain.
func Main(m *testing.M) { dbtest.Main(m) }

// URL returns the connection string of the package's database, for a child
// process or a command under test, failing tb when there is no database.
func URL(tb testing.TB) string {
	tb.Helper()
	return dbtest.URL(tb)
}

// Pool returns a pool on the package's database whose search_path is a new,
// empty schema, and the schema's name. The pool is closed when the test
// ends.
func Pool(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	return dbtest.Pool(tb)
}

// Env is an engine with its tables migrated, on a schema of its own.
type Env struct {
	// Pool's connections have Schema as their search_path: the service's own
	// tables, created through it, live beside the engine's.
	Pool   *pgxpool.Pool
	Schema string
	Engine *idem.Engine
	// URL is the connection string of Pool's database (without the
	// search_path), for what the service runs there itself.
	URL string
}

// New migrates the engine's tables into a new schema and returns an engine
// on it, built with opts (whose Schema New sets). It fails the test when
// either step fails.
func New(tb testing.TB, opts idem.Options) *Env {
	tb.Helper()
	return newEnv(tb, opts, false)
}

// NewDatabase is New on a database of its own, dropped when the test
// ends: for a service whose migrations make schemas of their own and whose
// SQL names its tables schema-qualified. Run them on Env.URL.
func NewDatabase(tb testing.TB, opts idem.Options) *Env {
	tb.Helper()
	return newEnv(tb, opts, true)
}

func newEnv(tb testing.TB, opts idem.Options, database bool) *Env {
	tb.Helper()
	var pool *pgxpool.Pool
	var schema, dsn string
	if database || dbtest.Pooled() {
		pool, schema, dsn = dbtest.DatabasePool(tb, nil)
	} else {
		pool, schema = dbtest.Pool(tb)
		dsn = dbtest.URL(tb)
	}
	dbtest.Migrate(tb, pool, schema)
	opts.Schema = schema
	eng, err := idem.New(pool, opts)
	if err != nil {
		tb.Fatalf("idemtest: %v", err)
	}
	return &Env{Pool: pool, Schema: schema, Engine: eng, URL: dsn}
}
