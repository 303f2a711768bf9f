package idem_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/pglocal"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// primaryAndStandby starts a primary and a streaming standby of it
// (pg_basebackup -R) from the local binaries, with the engine's tables in
// schema "idemgen" replayed on the standby.
func primaryAndStandby(t *testing.T) (primary, standby *pglocal.Cluster) {
	t.Helper()
	ctx := context.Background()
	primary, err := pglocal.Start(ctx, pglocal.Options{TCPPort: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { primary.Stop() })
	pool, err := pgxpool.New(ctx, primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := idemmigrate.New(pool, idem.DefaultSchema).Up(ctx); err != nil {
		t.Fatal(err)
	}
	bin, err := pglocal.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: its parent is the test's own, which the server's
	// user may not enter.
	parent, err := os.MkdirTemp("", "idem-standby-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	os.Chmod(parent, 0o777) // the server's user writes the copy there
	dir := filepath.Join(parent, "standby")
	cmd := exec.Command(filepath.Join(bin, "pg_basebackup"), "-D", dir, "-R", "-X", "stream", "-c", "fast", "-d", primary.DSN("postgres"))
	cred, err := pglocal.ServerUser()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg_basebackup: %v\n%s", err, out)
	}
	standby, err = pglocal.StartIn(ctx, dir, pglocal.Options{TCPPort: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { standby.Stop() })
	return primary, standby
}

// TestStoreOnAStandbyIsRefused: the engine claims nothing on a standby,
// where the records' unique key is not enforced and a lagging copy would
// let a retry claim a key again. A pool pointed at a standby is refused at
// Ready and at the claim, in every claim mode; a pool whose server is a
// standby only after a reconnect (a failover that demoted the node the
// pool points at) is refused on the new connection. Each answer is 503
// with Retry-After, logged with what failed.
func TestStoreOnAStandbyIsRefused(t *testing.T) {
	t.Parallel()
	primary, standby := primaryAndStandby(t)
	ctx := context.Background()
	phases := func(key string) []idem.Phase[payState] {
		return []idem.Phase[payState]{{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
			return created(`{"k":"` + key + `"}`), nil
		}}}
	}
	refused := func(where string, err error) {
		t.Helper()
		var ie *idem.Error
		switch {
		case !errors.As(err, &ie) || ie.Kind != idemtype.KindUnavailable || ie.RetryAfter <= 0:
			t.Errorf("%s: %v; want 503 unavailable with Retry-After", where, err)
		case !errors.Is(err, idem.ErrStandby):
			t.Errorf("%s: %v; want it to say the store is a standby", where, err)
		}
	}
	// Pointed at the standby from the start.
	pool, err := pgxpool.New(ctx, standby.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, mode := range []idem.ClaimMode{idem.ClaimLast, idem.ClaimFirst, idem.ClaimSeparate} {
		logs := &logLines{}
		eng, err := idem.New(pool, idem.Options{Claim: mode, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.Ready(ctx); !errors.Is(err, idem.ErrStandby) {
			t.Errorf("%s: Ready on a standby: %v; want ErrStandby", mode, err)
		}
		_, err = idem.Run(ctx, eng, payOp, request("t", "k-"+string(mode), "b"), phases("k"))
		refused(string(mode)+", a pool at a standby", err)
		if lines := logs.records(t, "idem: store error"); len(lines) != 1 || !strings.Contains(lines[0]["err"].(string), "standby") {
			t.Errorf("%s: store error lines %v; want one that says the store is a standby", mode, lines)
		}
	}
	// A pool at the primary, whose node is a standby once the pool
	// reconnects: the dialer sends new connections to the standby, as
	// after a failover that demoted the primary under a fixed address.
	var target atomic.Pointer[string]
	addr := primary.TCPAddr()
	target.Store(&addr)
	cfg, err := pgxpool.ParseConfig("postgres://postgres@" + addr + "/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, *target.Load())
	}
	moving, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer moving.Close()
	for _, mode := range []idem.ClaimMode{idem.ClaimLast, idem.ClaimFirst, idem.ClaimSeparate} {
		addr := primary.TCPAddr()
		target.Store(&addr)
		moving.Reset()
		eng, err := idem.New(moving, idem.Options{Claim: mode})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := idem.Run(ctx, eng, payOp, request("t", "m-"+string(mode), "b"), phases("m")); err != nil || out.Response.Status != 201 {
			t.Fatalf("%s: on the primary: %+v, %v", mode, out, err)
		}
		standbyAddr := standby.TCPAddr()
		target.Store(&standbyAddr)
		moving.Reset() // the failover broke every connection
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err = idem.Run(ctx, eng, payOp, request("t", "n-"+string(mode), "b"), phases("n"))
			if errors.Is(err, idem.ErrStandby) || time.Now().After(deadline) {
				break
			}
		}
		refused(string(mode)+", after the reconnect", err)
	}
}
