package idemadmin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// TestReplicationWithoutStandby: a primary with no standby reads as none,
// none synchronous, and no error.
func TestReplicationWithoutStandby(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.Pool(t)
	info, err := idemadmin.Replication(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Standbys) != 0 || info.Synchronous != 0 {
		t.Errorf("%+v; want no standby, none synchronous", info)
	}
}

// TestReplicationOfAStreamingStandby: the primary reports its streaming
// standby by name, asynchronous, then synchronous once
// synchronous_standby_names names it (quorum, as pg_auto_failover sets
// it); while the standby's replay is paused and the primary writes, its
// replay lag rises past a second while its flush lag stays low. On the
// standby itself the read is refused with idem.ErrStandby, and a role
// without pg_monitor gets ErrReplicationHidden instead of lags it cannot
// see.
func TestReplicationOfAStreamingStandby(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, standbys := dbtest.PrimaryAndStandbys(t, "node2")
	standby := standbys[0]
	pool := connect(t, primary.DSN("postgres"))
	info := read(t, pool)
	if len(info.Standbys) != 1 || info.Standbys[0].Name != "node2" || info.Standbys[0].State != "streaming" ||
		info.Standbys[0].SyncState != "async" || info.Synchronous != 0 {
		t.Fatalf("%+v; want node2 streaming, asynchronous", info)
	}

	exec(t, pool, `ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (node2)'`, `SELECT pg_reload_conf()`)
	for deadline := time.Now().Add(10 * time.Second); info.Synchronous != 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%+v; want node2 synchronous (quorum) after synchronous_standby_names named it", info)
		}
		info = read(t, pool)
	}
	if s := info.Standbys[0]; s.SyncState != "quorum" || !s.Synchronous() {
		t.Errorf("%+v; want quorum, synchronous", s)
	}

	// Replay paused on the standby, WAL written on the primary: the
	// standby receives and flushes it, and replays none.
	onStandby := connect(t, standby.DSN("postgres"))
	exec(t, onStandby, `SELECT pg_wal_replay_pause()`)
	exec(t, pool, `CREATE TABLE ticks (at timestamptz)`)
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		exec(t, pool, `INSERT INTO ticks VALUES (now())`)
	}
	s := read(t, pool).Standbys[0]
	t.Logf("replay paused for 2.5s: write lag %s, flush %s, replay %s", s.WriteLag, s.FlushLag, s.ReplayLag)
	if s.ReplayLag < time.Second || s.FlushLag >= time.Second || s.WriteLag > s.FlushLag {
		t.Errorf("replay paused for 2.5s: write %s, flush %s, replay %s; want replay over 1s, flush under it", s.WriteLag, s.FlushLag, s.ReplayLag)
	}
	exec(t, onStandby, `SELECT pg_wal_replay_resume()`)

	if _, err := idemadmin.Replication(ctx, onStandby); !errors.Is(err, idem.ErrStandby) {
		t.Errorf("on the standby: %v; want idem.ErrStandby", err)
	}

	exec(t, pool, `CREATE ROLE watcher LOGIN`)
	watcher := connect(t, strings.Replace(primary.DSN("postgres"), "user=postgres", "user=watcher", 1))
	if info, err := idemadmin.Replication(ctx, watcher); !errors.Is(err, idemadmin.ErrReplicationHidden) {
		t.Errorf("a role without pg_monitor: %+v, %v; want ErrReplicationHidden", info, err)
	}
	exec(t, pool, `GRANT pg_monitor TO watcher`)
	if info := read(t, watcher); len(info.Standbys) != 1 || info.Synchronous != 1 {
		t.Errorf("with pg_monitor: %+v; want node2, synchronous", info)
	}
}

func connect(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func read(t *testing.T, pool *pgxpool.Pool) *idemadmin.ReplicationInfo {
	t.Helper()
	info, err := idemadmin.Replication(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func exec(t *testing.T, pool *pgxpool.Pool, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := pool.Exec(context.Background(), s, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}
