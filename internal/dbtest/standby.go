package dbtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/pglocal"
)

// PrimaryAndStandbys starts, from the local binaries, a primary and one
// standby streaming from it (pg_basebackup -R) per name, which reports
// itself to it as that name (application_name; names may repeat); all are
// stopped when the test ends. It returns once the primary lists every
// standby as streaming in pg_stat_replication. The primary is not durable
// (pglocal's default: synchronous_commit off), so its commits never wait
// for a standby.
func PrimaryAndStandbys(tb testing.TB, names ...string) (primary *pglocal.Cluster, standbys []*pglocal.Cluster) {
	tb.Helper()
	ctx := context.Background()
	primary, err := pglocal.Start(ctx, pglocal.Options{TCPPort: -1})
	if err != nil {
		tb.Fatalf("idemtest: primary: %v", err)
	}
	tb.Cleanup(func() { primary.Stop() })
	bin, err := pglocal.BinDir()
	if err != nil {
		tb.Fatal(err)
	}
	cred, err := pglocal.ServerUser()
	if err != nil {
		tb.Fatal(err)
	}
	// Not tb.TempDir: its parent is the test's own, which the server's
	// user may not enter.
	parent, err := os.MkdirTemp("", "idemtest-standby-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(parent) })
	os.Chmod(parent, 0o777) // the server's user writes the copies there
	for i, name := range names {
		dir := filepath.Join(parent, fmt.Sprintf("standby%d", i))
		cmd := exec.Command(filepath.Join(bin, "pg_basebackup"), "-D", dir, "-R", "-X", "stream", "-c", "fast", "-d", primary.DSN("postgres"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := cmd.CombinedOutput(); err != nil {
			tb.Fatalf("idemtest: pg_basebackup: %v\n%s", err, out)
		}
		standby, err := pglocal.StartIn(ctx, dir, pglocal.Options{TCPPort: -1,
			Settings: map[string]string{"primary_conninfo": primary.DSN("postgres") + " application_name=" + name}})
		if err != nil {
			tb.Fatalf("idemtest: standby: %v", err)
		}
		tb.Cleanup(func() { standby.Stop() })
		standbys = append(standbys, standby)
	}
	conn, err := pgx.Connect(ctx, primary.DSN("postgres"))
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'`).Scan(&n)
		if err != nil {
			tb.Fatal(err)
		}
		if n == len(names) {
			return primary, standbys
		}
		if time.Now().After(deadline) {
			tb.Fatalf("idemtest: %d of the standbys %v stream from the primary after 30s", n, names)
		}
	}
}
