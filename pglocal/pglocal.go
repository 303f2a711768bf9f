// Package pglocal starts a PostgreSQL cluster from the server binaries
// installed on the machine (initdb and postgres): a throwaway one for tests
// and demos (Start, Open), or one whose data stays in a directory across
// restarts, for a service run locally without a database of its own
// (StartIn, Persistent).
//
// A throwaway cluster lives in a temporary directory, listens on a unix
// socket in that directory (and optionally on a loopback TCP port), and is
// removed by Stop; one left behind by a process that died without Stop is
// removed by the next Start. When the calling process runs as root, the
// server runs as the "postgres" user, since PostgreSQL refuses to run as
// root.
package pglocal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Options configure a cluster. The zero value is a fast, non-durable cluster
// reachable only through its unix socket.
type Options struct {
	// TCPPort, when non-zero, also makes the server listen on 127.0.0.1:TCPPort.
	// Use -1 to pick a free port.
	TCPPort int
	// Durable keeps fsync and synchronous commit on, for measurements whose
	// result depends on WAL flushes. By default both are off for speed.
	Durable bool
	// Settings are extra server settings (name -> value), passed as -c flags.
	Settings map[string]string
	// Log receives the server's output. Nil discards it.
	Log io.Writer
}

// Cluster is a running throwaway PostgreSQL server.
type Cluster struct {
	opts    Options
	dir     string   // the temporary directory: the socket's, and the data's unless kept
	kept    bool     // dataDir is the caller's, kept by Stop
	owner   *os.File // the locked owner file (see sweep)
	dataDir string
	sockDir string
	port    int // the port number of the socket file, and of TCP when enabled
	bin     string
	cred    *syscall.Credential

	mu  sync.Mutex
	cmd *exec.Cmd
	// exited is closed when the current server process has exited.
	exited chan struct{}
}

// ErrNoBinaries is returned by Start when initdb or postgres cannot be found.
var ErrNoBinaries = errors.New("pglocal: PostgreSQL server binaries (initdb, postgres) not found on PATH or in /usr/lib/postgresql/*/bin; install the PostgreSQL server package or set DATABASE_URL to an existing database")

// BinDir returns the directory holding initdb and postgres.
func BinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Sort(sort.Reverse(sort.StringSlice(matches))) // newest major first
	for _, m := range matches {
		return filepath.Dir(m), nil
	}
	return "", ErrNoBinaries
}

// Start creates and starts a new cluster. Call Stop to shut it down and
// remove its files.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	return startCluster(ctx, "", opts)
}

// StartIn starts a durable cluster whose data lives in dataDir: created
// (initdb) when dataDir holds none, reused as it is otherwise, and kept by
// Stop. It is what a service run locally without DATABASE_URL needs, so
// that a retry after a restart finds the records of the first attempt.
// Options.Durable is forced on: a record acknowledged must survive a crash.
// Only the socket lives in a temporary directory (a unix socket's path is
// limited to about 100 bytes). Run as root, when the postgres user cannot
// reach dataDir (a parent of mode 0700), the data goes under that user's
// home directory instead, in a folder named after dataDir; DataDir says
// where. A server another process still runs on
// dataDir is waited for up to 30s (a fast shutdown in progress), then an
// error.
func StartIn(ctx context.Context, dataDir string, opts Options) (*Cluster, error) {
	if dataDir == "" {
		return nil, errors.New("pglocal: StartIn needs a data directory")
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("pglocal: %w", err)
	}
	opts.Durable = true
	cred, err := ServerUser()
	if err != nil {
		return nil, err
	}
	if cred != nil && !reachable(filepath.Dir(abs), cred) {
		abs = elsewhere(abs)
	}
	return startCluster(ctx, abs, opts)
}

// reachable reports whether a process with cred may traverse every
// directory from / down to dir, by their mode bits.
func reachable(dir string, cred *syscall.Credential) bool {
	for d := dir; ; d = filepath.Dir(d) {
		var st syscall.Stat_t
		if err := syscall.Stat(d, &st); err == nil {
			var bit uint32 = 0o001
			switch {
			case st.Uid == cred.Uid:
				bit = 0o100
			case st.Gid == cred.Gid:
				bit = 0o010
			}
			if st.Mode&bit == 0 {
				return false
			}
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

// elsewhere is where a root process keeps the data it was asked to keep in
// dir when the postgres user cannot reach dir (a home or temporary
// directory of mode 0700): under that user's home directory, in a folder
// named after dir, so that the same dir finds the same data again.
func elsewhere(dir string) string {
	home := "/var/tmp"
	if u, err := user.Lookup("postgres"); err == nil && u.HomeDir != "" {
		if _, err := os.Stat(u.HomeDir); err == nil {
			home = u.HomeDir
		}
	}
	sum := sha256.Sum256([]byte(dir))
	return filepath.Join(home, "idemgen", sanitize(filepath.Base(dir))+"-"+hex.EncodeToString(sum[:4]))
}

func startCluster(ctx context.Context, dataDir string, opts Options) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	sweep()
	dir, err := os.MkdirTemp("", "pglocal-")
	if err != nil {
		return nil, fmt.Errorf("pglocal: %w", err)
	}
	// The owner file, locked for as long as this process holds the
	// cluster: a later Start removes the directory once no process holds
	// it (this one died without Stop). A lock, not a pid, so that owners
	// in other pid namespaces sharing the temporary directory are seen.
	owner, err := lockOwner(filepath.Join(dir, ownerFile))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &Cluster{opts: opts, dir: dir, dataDir: filepath.Join(dir, "data"), sockDir: dir, bin: bin, owner: owner}
	if dataDir != "" {
		c.dataDir, c.kept = dataDir, true
	}
	if err := c.init(ctx); err != nil {
		c.removeDir()
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		c.removeDir()
		return nil, err
	}
	return c, nil
}

// lockOwner creates path and holds an exclusive lock on it, with this
// process's pid inside for people who look.
func lockOwner(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pglocal: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("pglocal: locking %s: %w", path, err)
	}
	f.WriteString(strconv.Itoa(os.Getpid()))
	return f, nil
}

// removeDir removes the cluster's temporary directory and lets go of its
// owner lock.
func (c *Cluster) removeDir() error {
	err := os.RemoveAll(c.dir)
	if c.owner != nil {
		c.owner.Close()
	}
	return err
}

// ownerFile, in a cluster's temporary directory, holds the pid of the
// process that started it.
const ownerFile = "pglocal.owner"

// sweep removes the temporary directories of clusters whose owner died
// without Stop (a killed test binary, a crashed demo): no process holds
// their owner lock, and their server, which got SIGINT when the owner
// died, is gone. A directory without an owner file is left alone.
func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "pglocal-*"))
	for _, d := range dirs {
		f, err := os.OpenFile(filepath.Join(d, ownerFile), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close() // held: its owner lives
			continue
		}
		if serverPid(filepath.Join(d, "data")) == 0 { // not still shutting down
			os.RemoveAll(d)
		}
		f.Close()
	}
}

// alive reports whether a process with this pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// serverPid is the pid in dataDir's postmaster.pid when that process is
// alive, else 0.
func serverPid(dataDir string) int {
	pm, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pm), "\n", 2)[0]))
	if err != nil || !alive(pid) || !isPostgres(pid) {
		return 0
	}
	return pid
}

// isPostgres reports whether process pid is a PostgreSQL server, by its
// name: a stale postmaster.pid's number may since have gone to another
// process. Where /proc cannot tell, a live process counts as one.
func isPostgres(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return true
	}
	name := strings.TrimSpace(string(comm))
	return name == "postgres" || name == "postmaster"
}

// ServerUser returns the credential PostgreSQL's programs must run with:
// the "postgres" user's when this process runs as root (PostgreSQL refuses
// root), nil otherwise (run them as this process's user).
func ServerUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pglocal: running as root needs a 'postgres' user to run the server as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (c *Cluster) init(ctx context.Context) error {
	var err error
	if c.cred, err = ServerUser(); err != nil {
		return err
	}
	if c.cred != nil {
		if err := os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("pglocal: %w", err)
		}
	}
	if c.kept {
		if err := c.prepareKept(); err != nil {
			return err
		}
	}
	port := c.opts.TCPPort
	if port <= 0 {
		p, err := freePort()
		if err != nil {
			return err
		}
		port = p
	}
	c.port = port
	if c.kept {
		if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
			return nil // a cluster already: reused as it is
		}
	}
	args := []string{"-D", c.dataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"}
	if !c.kept {
		args = append(args, "--no-sync") // a throwaway cluster need not survive a crash
	}
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "initdb"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		if c.kept && c.cred != nil {
			return fmt.Errorf("pglocal: initdb in %s: %w (the postgres user must be able to reach that directory)\n%s", c.dataDir, err, out)
		}
		return fmt.Errorf("pglocal: initdb: %w\n%s", err, out)
	}
	return nil
}

// prepareKept makes the caller's data directory usable: created (mode
// 0700, owned by the server's user) when missing, and free of a server
// that another process still runs on it.
func (c *Cluster) prepareKept() error {
	// Parents the server's user may traverse, the data its own alone.
	if err := os.MkdirAll(filepath.Dir(c.dataDir), 0o755); err != nil {
		return fmt.Errorf("pglocal: %w", err)
	}
	if err := os.Mkdir(c.dataDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("pglocal: %w", err)
	}
	if c.cred != nil {
		if err := os.Chown(c.dataDir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("pglocal: %w", err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		pid := serverPid(c.dataDir)
		if pid == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pglocal: a PostgreSQL server (pid %d) still runs on %s: is another process using that directory?", pid, c.dataDir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *Cluster) start(ctx context.Context) error {
	listen := ""
	if c.opts.TCPPort != 0 {
		listen = "127.0.0.1"
	}
	args := []string{"-D", c.dataDir, "-k", c.sockDir, "-p", strconv.Itoa(c.port),
		"-c", "listen_addresses=" + listen, "-c", "max_connections=300",
		"-c", "shared_buffers=128MB"}
	if !c.opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	keys := make([]string, 0, len(c.opts.Settings))
	for k := range c.opts.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+c.opts.Settings[k])
	}
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), args...)
	// The server gets SIGINT (fast shutdown) if this process dies, so a
	// crashed test run does not leave servers behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGINT, Setpgid: true}
	if c.opts.Log != nil {
		cmd.Stdout, cmd.Stderr = c.opts.Log, c.opts.Log
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pglocal: starting postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	c.mu.Lock()
	c.cmd, c.exited = cmd, exited
	c.mu.Unlock()

	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, c.DSN("postgres"))
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("pglocal: postgres exited during startup (set Options.Log to see its output): %w", err)
		case <-ctx.Done():
			c.Stop()
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.stopServer()
			return fmt.Errorf("pglocal: postgres did not accept connections within 30s: %w", err)
		}
	}
}

// DSN returns a connection string for database db over the unix socket.
func (c *Cluster) DSN(db string) string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable", c.sockDir, c.port, db)
}

// URL returns a postgres:// URL for database db over the unix socket.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@/%s?host=%s&port=%d&sslmode=disable", db, c.sockDir, c.port)
}

// TCPAddr returns the loopback TCP address, or "" when TCP is off.
func (c *Cluster) TCPAddr() string {
	if c.opts.TCPPort == 0 {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port))
}

// CreateDatabase creates a new, empty database.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	return CreateDatabase(ctx, c.DSN("postgres"), name)
}

// Restart stops the server with a fast shutdown and starts it again on the
// same data directory and port. Existing connections are broken.
func (c *Cluster) Restart(ctx context.Context) error {
	c.stopServer()
	return c.start(ctx)
}

// Kill ends the server as a crash would: SIGKILL to the postmaster and
// every process of its group, at once, with no shutdown checkpoint.
// Restart starts it again, recovering from the WAL. A cluster that is not
// Durable commits with synchronous_commit off and so loses its last
// acknowledged commits on Kill, as PostgreSQL does; set it on in
// Settings for a crash that keeps every acknowledged commit (fsync may
// stay off: a process's crash keeps the kernel's pages).
func (c *Cluster) Kill() {
	cmd, exited := c.take()
	if cmd == nil {
		return
	}
	// Every backend and auxiliary process makes itself the leader of a
	// process group of its own (PostgreSQL's InitPostmasterChild): they
	// are found as the postmaster's children, and killed with it.
	procs := append(children(cmd.Process.Pid), cmd.Process.Pid)
	for _, pid := range procs {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	<-exited
	// Wait for them to be gone, so that the port and the shared memory
	// are free and no session outlives the crash.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !slices.ContainsFunc(procs, running) {
			return
		}
	}
}

// children returns the pids of pid's child processes, from /proc.
func children(pid int) []int {
	var out []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		child, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if ppid, _ := procStat(child); ppid == pid {
			out = append(out, child)
		}
	}
	return out
}

// procStat returns pid's parent and state from /proc/<pid>/stat (0 and ""
// when it is gone).
func procStat(pid int) (ppid int, state string) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, ""
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
	f := strings.Fields(rest)
	if len(f) < 2 {
		return 0, ""
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0]
}

// running reports whether pid is a process that has not exited (a zombie
// has).
func running(pid int) bool {
	_, state := procStat(pid)
	return state != "" && state != "Z" && state != "X"
}

// Stop shuts the server down and removes its files: all of them, or, for
// a cluster StartIn started, all but its data directory.
func (c *Cluster) Stop() error {
	c.stopServer()
	return c.removeDir()
}

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// take returns the running server's process and its exit, and forgets
// them: the caller ends it. cmd is nil when none runs.
func (c *Cluster) take() (cmd *exec.Cmd, exited chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cmd, exited = c.cmd, c.exited
	c.cmd = nil
	return cmd, exited
}

func (c *Cluster) stopServer() {
	cmd, exited := c.take()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
}

// CreateDatabase creates database name using the connection string dsn.
func CreateDatabase(ctx context.Context, dsn, name string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

// DropDatabase drops database name, disconnecting its sessions.
func DropDatabase(ctx context.Context, dsn, name string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pglocal: picking a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Env is the result of Open: a database URL and a function that releases
// whatever Open started.
type Env struct {
	// URL is the connection string of a database for the caller's use.
	URL string
	// Cluster is the throwaway cluster, or nil when DATABASE_URL was used.
	Cluster *Cluster
	close   func()
}

// Close drops the database Open created and stops the cluster it started.
func (e *Env) Close() { e.close() }

// Open gives the caller a fresh database named after prefix: on the server
// named by the DATABASE_URL environment variable when it is set, otherwise on
// a throwaway cluster started from the local binaries.
func Open(ctx context.Context, prefix string, opts Options) (*Env, error) {
	base, err := databaseURL()
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s_%d_%d", sanitize(prefix), os.Getpid(), time.Now().UnixNano()%1e6)
	if base != "" && Citus() {
		// Citus keeps its nodes and extension per database: every caller
		// shares DATABASE_URL's own, and keeps apart by schema.
		return &Env{URL: base, close: func() {}}, nil
	}
	if base != "" {
		if err := CreateDatabase(ctx, base, name); err != nil {
			return nil, fmt.Errorf("pglocal: creating database %s on DATABASE_URL: %w", name, err)
		}
		url := withDatabase(base, name)
		return &Env{URL: url, close: func() { DropDatabase(context.Background(), base, name) }}, nil
	}
	c, err := Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := c.CreateDatabase(ctx, name); err != nil {
		c.Stop()
		return nil, err
	}
	return &Env{URL: c.URL(name), Cluster: c, close: func() { c.Stop() }}, nil
}

// CitusEnv is the environment variable that says DATABASE_URL is a Citus
// coordinator whose database is set up (the extension, the workers): Open
// then gives every caller that database itself, since a database created
// anew would have no Citus nodes.
const CitusEnv = "IDEMGEN_PG_CITUS"

// Citus reports whether CitusEnv is 1.
func Citus() bool { return os.Getenv(CitusEnv) == "1" }

// Persistent gives a service its database named db: on the server named
// by DATABASE_URL when it is set (db is then that URL's own, as given), or
// else on a cluster StartIn keeps in dataDir, db created on first use.
// Close stops the cluster and keeps its data: the next Persistent on
// dataDir finds every row again.
func Persistent(ctx context.Context, dataDir, db string, opts Options) (*Env, error) {
	url, err := databaseURL()
	if err != nil {
		return nil, err
	}
	if url != "" {
		return &Env{URL: url, close: func() {}}, nil
	}
	c, err := StartIn(ctx, dataDir, opts)
	if err != nil {
		return nil, err
	}
	if err := c.CreateDatabase(ctx, db); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42P04" { // duplicate_database: made on an earlier run
			c.Stop()
			return nil, err
		}
	}
	return &Env{URL: c.URL(db), Cluster: c, close: func() { c.Stop() }}, nil
}

// databaseURL returns the DATABASE_URL environment variable, "" when it is
// unset or empty, and an error naming the variable when it cannot be a
// connection string. It is checked before anything connects with it: pgx
// reads a blank string as "connect to the defaults", a server nobody named.
func databaseURL() (string, error) {
	url := os.Getenv("DATABASE_URL")
	switch {
	case url == "":
		return "", nil
	case strings.TrimSpace(url) == "":
		return "", errors.New("pglocal: DATABASE_URL is blank; unset it for a throwaway cluster, or set it to a PostgreSQL URL")
	}
	if _, err := pgx.ParseConfig(url); err != nil {
		// pgx's message quotes the URL with its password masked.
		return "", fmt.Errorf("pglocal: DATABASE_URL is not a valid PostgreSQL connection string: %w", err)
	}
	return url, nil
}

// withDatabase rewrites the database name in a URL or keyword/value DSN.
func withDatabase(dsn, name string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		rest := dsn[strings.Index(dsn, "://")+3:]
		q := ""
		if i := strings.IndexByte(rest, '?'); i >= 0 {
			rest, q = rest[:i], rest[i:]
		}
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			rest = rest[:i]
		}
		return dsn[:strings.Index(dsn, "://")+3] + rest + "/" + name + q
	}
	return dsn + " dbname=" + name
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}
