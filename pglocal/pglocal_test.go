package pglocal

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestStartQueryRestartStop runs a whole cluster life: it must answer
// queries, survive a restart with its data, and leave no files behind.
func TestStartQueryRestartStop(t *testing.T) {
	ctx := context.Background()
	c, err := Start(ctx, Options{TCPPort: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	connectKept(t, c.URL("postgres"), true).Close(ctx)
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	connectKept(t, "postgres://postgres@"+c.TCPAddr()+"/postgres?sslmode=disable", false).Close(ctx)
}

// TestKillThenRestart: Kill ends the server and every backend at once (a
// session open before it is broken), and Restart recovers what committed.
func TestKillThenRestart(t *testing.T) {
	ctx := context.Background()
	// A commit is acknowledged once its WAL is written (not flushed: a
	// process's crash keeps the kernel's pages).
	c, err := Start(ctx, Options{Settings: map[string]string{"synchronous_commit": "on"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	conn := connectKept(t, c.URL("postgres"), true)
	defer conn.Close(ctx)
	c.Kill()
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("a session survived Kill")
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	connectKept(t, c.URL("postgres"), false).Close(ctx)
}

// connectKept connects to url and, with create, makes the table kept with
// its one row, or else checks that the row is there.
func connectKept(t *testing.T, url string, create bool) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if create {
		if _, err := conn.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)"); err != nil {
			t.Fatal(err)
		}
		return conn
	}
	var v int
	if err := conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 7 {
		t.Fatalf("the kept row: v=%d err=%v", v, err)
	}
	return conn
}

func TestWithDatabase(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:p@h:5/old?sslmode=disable": "postgres://u:p@h:5/new?sslmode=disable",
		"postgres://u@h":                         "postgres://u@h/new",
		"host=/tmp port=5":                       "host=/tmp port=5 dbname=new",
	} {
		if got := withDatabase(in, "new"); got != want {
			t.Errorf("withDatabase(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestOpenChecksDatabaseURLFirst: a DATABASE_URL that cannot be used is
// reported as such, naming the variable, before anything connects with it.
func TestOpenChecksDatabaseURLFirst(t *testing.T) {
	for _, bad := range []string{
		"postgres://u:secret@localhost:5432/db?sslmode=bogus", // pgx rejects it
		"   ", // blank: pgx would connect to its defaults (local socket, OS user)
	} {
		t.Setenv("DATABASE_URL", bad)
		env, err := Open(context.Background(), "badurl", Options{})
		if err == nil {
			env.Close()
			t.Errorf("DATABASE_URL=%q: Open succeeded", bad)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "pglocal: DATABASE_URL ") || strings.Contains(msg, "creating database") ||
			strings.Contains(msg, "dial") || strings.Contains(msg, "secret") {
			t.Errorf("DATABASE_URL=%q: %v\nwant an error that names the variable, before any connection, without the password", bad, err)
		}
	}
}

// TestStartInKeepsData: a cluster StartIn keeps its data in the caller's
// directory across Stop and a new start, and Persistent finds its database
// again.
func TestStartInKeepsData(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state", "pg")
	env, err := Persistent(ctx, dir, "svc", Options{})
	if err != nil {
		t.Fatal(err)
	}
	// dir, or, as root when the postgres user cannot reach it, elsewhere.
	data := env.Cluster.DataDir()
	t.Cleanup(func() { os.RemoveAll(data) })
	conn, err := pgx.Connect(ctx, env.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	env.Close()
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
		t.Fatalf("Close removed the data: %v", err)
	}
	env, err = Persistent(ctx, dir, "svc", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if env.Cluster.DataDir() != data {
		t.Fatalf("the second start used %s, the first %s", env.Cluster.DataDir(), data)
	}
	conn, err = pgx.Connect(ctx, env.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v int
	if err := conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 7 {
		t.Fatalf("after a restart: v=%d err=%v", v, err)
	}
	var fsync string
	if err := conn.QueryRow(ctx, "SHOW fsync").Scan(&fsync); err != nil || fsync != "on" {
		t.Errorf("fsync is %q (%v); a kept cluster must be durable", fsync, err)
	}
}

// TestSweepRemovesOrphans: the temporary directory of a cluster whose
// owner died (its owner file unlocked) is removed by the next Start; one
// whose owner holds the lock is kept, whatever the pid inside says.
func TestSweepRemovesOrphans(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphan, err := os.MkdirTemp("", "pglocal-")
	if err != nil {
		t.Fatal(err)
	}
	mine, err := os.MkdirTemp("", "pglocal-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(mine)
	// The orphan's owner file is not locked (its owner died); mine is.
	os.WriteFile(filepath.Join(orphan, ownerFile), []byte(strconv.Itoa(dead.Process.Pid)), 0o644)
	lock, err := lockOwner(filepath.Join(mine, ownerFile))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	sweep()
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		os.RemoveAll(orphan)
		t.Errorf("the orphan's directory is still there (%v)", err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("a live owner's directory was removed: %v", err)
	}
}
