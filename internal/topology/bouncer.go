package topology

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/pglocal"
)

// BouncerConfig is what pgbouncer.ini says.
type BouncerConfig struct {
	ListenPort         int
	UpstreamHost       string
	UpstreamPort       int
	Dir                string // the auth file, the log and the pid file go here
	PoolSize           int    // server connections per database and user
	MaxClientConn      int
	ServerIdleTimeout  int // seconds
	ServerLoginRetry   int // seconds between attempts to reach a server that refused
	QueryWaitTimeoutMS int // how long a client waits for a server connection, in ms (0: for ever)
}

// Render returns pgbouncer.ini: every database name goes to the upstream
// server (the tests create their own databases), users are trusted as the
// server trusts them, and server connections are pooled per transaction.
func (c BouncerConfig) Render() string {
	lines := []string{
		"[databases]",
		fmt.Sprintf("* = host=%s port=%d", c.UpstreamHost, c.UpstreamPort),
		"",
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(c.ListenPort),
		"unix_socket_dir =",
		"auth_type = trust",
		"auth_file = " + filepath.Join(c.Dir, "users.txt"),
		"pool_mode = transaction",
		"default_pool_size = " + strconv.Itoa(c.PoolSize),
		"max_client_conn = " + strconv.Itoa(c.MaxClientConn),
		"server_idle_timeout = " + strconv.Itoa(c.ServerIdleTimeout),
		"server_login_retry = " + strconv.Itoa(c.ServerLoginRetry),
		fmt.Sprintf("query_wait_timeout = %g", float64(c.QueryWaitTimeoutMS)/1000),
		"logfile = " + filepath.Join(c.Dir, "pgbouncer.log"),
		"pidfile = " + filepath.Join(c.Dir, "pgbouncer.pid"),
		"admin_users = postgres",
		"",
	}
	return strings.Join(lines, "\n")
}

// Bouncer is PgBouncer in transaction pooling mode, started in front of an
// upstream server. It implements the chaos harness's Pooler.
type Bouncer struct {
	Dir      string
	PoolSize int // default 20
	addr     string
	cmd      *exec.Cmd
	exited   chan struct{}
}

// Start writes the configuration under b.Dir, starts pgbouncer in front of
// upstream (host:port) and waits until it answers; it returns its address.
func (b *Bouncer) Start(ctx context.Context, upstream string) (string, error) {
	host, portStr, err := net.SplitHostPort(upstream)
	if err != nil {
		return "", err
	}
	uport, err := strconv.Atoi(portStr)
	if err != nil {
		return "", err
	}
	ports, err := freePorts(1)
	if err != nil {
		return "", err
	}
	if b.PoolSize == 0 {
		b.PoolSize = 20
	}
	cfg := BouncerConfig{ListenPort: ports[0], UpstreamHost: host, UpstreamPort: uport, Dir: b.Dir, PoolSize: b.PoolSize,
		MaxClientConn: 1000, ServerIdleTimeout: 60, ServerLoginRetry: 1, QueryWaitTimeoutMS: 30000}
	cred, err := pglocal.ServerUser()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(b.Dir, 0o755); err != nil {
		return "", err
	}
	files := map[string]string{"pgbouncer.ini": cfg.Render(), "users.txt": `"postgres" ""` + "\n"}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(b.Dir, name), []byte(body), 0o644); err != nil {
			return "", err
		}
	}
	if cred != nil {
		if err := os.Chown(b.Dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return "", err
		}
	}
	cmd := exec.Command("pgbouncer", filepath.Join(b.Dir, "pgbouncer.ini"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("topology: starting pgbouncer: %w", err)
	}
	b.cmd, b.exited = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(b.exited) }()
	b.addr = fmt.Sprintf("127.0.0.1:%d", cfg.ListenPort)
	for start := time.Now(); ; {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, b.URL("postgres"))
		cancel()
		if err == nil {
			conn.Close(ctx)
			return b.addr, nil
		}
		select {
		case <-b.exited:
			return "", fmt.Errorf("topology: pgbouncer exited; see %s", filepath.Join(b.Dir, "pgbouncer.log"))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Since(start) > 20*time.Second {
			b.Stop()
			return "", fmt.Errorf("topology: pgbouncer did not answer within 20s: %w", err)
		}
	}
}

// URL is a URL of database db through the pooler.
func (b *Bouncer) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", b.addr, db)
}

// Stop stops pgbouncer (SIGINT: at once, closing its connections).
func (b *Bouncer) Stop() {
	if b.cmd == nil {
		return
	}
	b.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-b.exited:
	case <-time.After(10 * time.Second):
		b.cmd.Process.Kill()
		<-b.exited
	}
	b.cmd = nil
}
