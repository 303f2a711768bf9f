package topology

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/pglocal"
)

// MonitorSettings make the monitor notice a dead primary and promote the
// standby within seconds instead of pg_auto_failover's defaults (a node is
// unhealthy after 20s, and the monitor waits 30s more for the old primary
// to report itself demoted): everything here runs on one machine, where a
// health check that takes a second has failed. They are appended to the
// monitor's postgresql.conf; the values are milliseconds.
var MonitorSettings = []Setting{
	{"pgautofailover.health_check_period", "1000"},
	{"pgautofailover.health_check_timeout", "1000"},
	{"pgautofailover.health_check_max_retries", "1"},
	{"pgautofailover.health_check_retry_delay", "500"},
	{"pgautofailover.node_considered_unhealthy_timeout", "3000"},
	{"pgautofailover.primary_demote_timeout", "3000"},
}

// NodeSettings keep each of the three servers small: pg_auto_failover sizes
// shared_buffers for a machine of their own.
var NodeSettings = []Setting{{"shared_buffers", "'64MB'"}, {"max_connections", "200"}}

// Setting is one line of postgresql.conf.
type Setting struct{ Name, Value string }

// confLines renders settings as postgresql.conf lines.
func confLines(settings []Setting) string {
	var b strings.Builder
	b.WriteString("\n# added by idemgen's make topology\n")
	for _, s := range settings {
		fmt.Fprintf(&b, "%s = %s\n", s.Name, s.Value)
	}
	return b.String()
}

// MultiHostURL is a libpq-style URL naming several hosts: pgx tries them in
// order, and with target_session_attrs=read-write keeps the first that
// accepts writes, the primary.
func MultiHostURL(user, db string, hosts []string, params url.Values) string {
	q := ""
	if len(params) > 0 {
		q = "?" + params.Encode()
	}
	return "postgres://" + url.PathEscape(user) + "@" + strings.Join(hosts, ",") + "/" + url.PathEscape(db) + q
}

// NodeState is one node as `pg_autoctl show state --json` reports it.
type NodeState struct {
	Name     string `json:"nodename"`
	Host     string `json:"nodehost"`
	Port     int    `json:"nodeport"`
	Health   int    `json:"health"`
	Current  string `json:"current_group_state"`
	Assigned string `json:"assigned_group_state"`
	LSN      string `json:"reported_lsn"`
	TLI      int    `json:"reported_tli"`
}

// ParseState parses `pg_autoctl show state --json`.
func ParseState(data []byte) ([]NodeState, error) {
	var st []NodeState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("topology: pg_autoctl show state: %w", err)
	}
	return st, nil
}

// Primary returns the node that is the primary, reported and assigned
// (primary, or wait_primary: a primary whose standby is gone, which takes
// writes without waiting for one), or nil.
func Primary(st []NodeState) *NodeState {
	for i, n := range st {
		if n.Current == n.Assigned && (n.Current == "primary" || n.Current == "wait_primary" || n.Current == "single") {
			return &st[i]
		}
	}
	return nil
}

// Secondary returns a node that is a running secondary, or nil.
func Secondary(st []NodeState) *NodeState {
	for i, n := range st {
		if n.Current == "secondary" && n.Assigned == "secondary" {
			return &st[i]
		}
	}
	return nil
}

// Formation is a running pg_auto_failover formation: a monitor, a primary
// and a synchronous standby, each a `pg_autoctl run` process group.
type Formation struct {
	dir, db string
	cred    *syscall.Credential
	env     []string
	monitor *node
	nodes   []*node
}

type node struct {
	name, pgdata, log string
	port              int
	mu                sync.Mutex
	cmd               *exec.Cmd
	exited            chan struct{}
}

// StartFormation creates a formation under dir (which it removes on Stop)
// with database db on the nodes, starts it, and waits until the primary
// has its synchronous standby.
func StartFormation(ctx context.Context, dir, db string) (_ *Formation, err error) {
	bin, err := pglocal.BinDir()
	if err != nil {
		return nil, err
	}
	cred, err := pglocal.ServerUser()
	if err != nil {
		return nil, err
	}
	f := &Formation{dir: dir, db: db, cred: cred}
	defer func() {
		if err != nil {
			f.Stop()
		}
	}()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := f.chown(dir); err != nil {
		return nil, err
	}
	// pg_autoctl keeps its configuration and state under the XDG
	// directories: here, inside dir, not in the postgres user's home.
	f.env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "config"),
		"XDG_DATA_HOME=" + filepath.Join(dir, "share"), "XDG_RUNTIME_DIR=" + filepath.Join(dir, "run")}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	pgctl := filepath.Join(bin, "pg_ctl")
	f.monitor = &node{name: "monitor", port: ports[0], pgdata: filepath.Join(dir, "monitor"), log: filepath.Join(dir, "monitor.log")}
	if err := f.autoctl(ctx, "create", "monitor", "--pgdata", f.monitor.pgdata, "--pgport", strconv.Itoa(f.monitor.port),
		"--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--pgctl", pgctl); err != nil {
		return nil, err
	}
	if err := f.autoctl(ctx, "config", "set", "--pgdata", f.monitor.pgdata, "postgresql.listen_addresses", "127.0.0.1"); err != nil {
		return nil, err
	}
	if err := appendConf(f.monitor.pgdata, append(append([]Setting{}, MonitorSettings...), NodeSettings...)); err != nil {
		return nil, err
	}
	if err := f.start(f.monitor); err != nil {
		return nil, err
	}
	for i, port := range ports[1:] {
		n := &node{name: fmt.Sprintf("node%d", i+1), port: port, pgdata: filepath.Join(dir, fmt.Sprintf("node%d", i+1))}
		n.log = n.pgdata + ".log"
		// The first node becomes the primary; the second is created from
		// it (pg_basebackup) and becomes its synchronous standby.
		if err := f.autoctl(ctx, "create", "postgres", "--pgdata", n.pgdata, "--pgport", strconv.Itoa(port),
			"--hostname", "127.0.0.1", "--listen", "127.0.0.1", "--name", n.name, "--auth", "trust", "--no-ssl",
			"--pgctl", pgctl, "--monitor", f.MonitorURL(), "--username", "postgres", "--dbname", db,
			"--candidate-priority", "50", "--replication-quorum", "true"); err != nil {
			return nil, err
		}
		if err := appendConf(n.pgdata, NodeSettings); err != nil {
			return nil, err
		}
		if err := f.start(n); err != nil {
			return nil, err
		}
		f.nodes = append(f.nodes, n)
		want := func(st []NodeState) bool { return Primary(st) != nil }
		if i == 1 {
			want = func(st []NodeState) bool {
				p := Primary(st)
				return p != nil && p.Current == "primary" && Secondary(st) != nil
			}
		}
		if _, err := f.waitState(ctx, 2*time.Minute, want); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// MonitorURL is the monitor's connection string.
func (f *Formation) MonitorURL() string {
	return MultiHostURL("autoctl_node", "pg_auto_failover", []string{fmt.Sprintf("127.0.0.1:%d", f.monitor.port)},
		url.Values{"sslmode": {"disable"}})
}

// URL is the multi-host URL of the formation's database: pgx connects to
// whichever node accepts writes.
func (f *Formation) URL() string {
	var hosts []string
	for _, n := range f.nodes {
		hosts = append(hosts, fmt.Sprintf("127.0.0.1:%d", n.port))
	}
	return MultiHostURL("postgres", f.db, hosts, url.Values{"sslmode": {"disable"},
		"target_session_attrs": {"read-write"}})
}

// Dir is where the formation's data directories and logs are.
func (f *Formation) Dir() string { return f.dir }

// State returns the nodes as the monitor sees them.
func (f *Formation) State(ctx context.Context) ([]NodeState, error) {
	out, err := f.autoctlOutput(ctx, "show", "state", "--pgdata", f.monitor.pgdata, "--json")
	if err != nil {
		return nil, err
	}
	return ParseState(out)
}

// Replication describes the primary's synchronous replication, as the
// primary reports it: its synchronous_standby_names and the sync_state of
// each standby it streams to.
func (f *Formation) Replication(ctx context.Context) (string, error) {
	conn, err := pgx.Connect(ctx, f.URL())
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var names string
	if err := conn.QueryRow(ctx, `SHOW synchronous_standby_names`).Scan(&names); err != nil {
		return "", err
	}
	rows, err := conn.Query(ctx, `SELECT application_name || ' ' || sync_state FROM pg_stat_replication ORDER BY 1`)
	if err != nil {
		return "", err
	}
	states, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("synchronous_standby_names = %s; standbys: %s", names, strings.Join(states, ", ")), nil
}

// HoldReplay pauses WAL replay on the standby (pg_wal_replay_pause): it
// goes on receiving and flushing the primary's WAL, so the primary's
// commits still get its acknowledgement, and its replay lag rises until
// release resumes it. It implements the chaos harness's lag before a
// failover.
func (f *Formation) HoldReplay(ctx context.Context) (release func(context.Context) error, err error) {
	st, err := f.State(ctx)
	if err != nil {
		return nil, err
	}
	s := Secondary(st)
	if s == nil {
		return nil, errors.New("topology: no standby to hold back")
	}
	dsn := MultiHostURL("postgres", f.db, []string{fmt.Sprintf("%s:%d", s.Host, s.Port)}, url.Values{"sslmode": {"disable"}})
	run := func(ctx context.Context, sql string) error {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := run(ctx, `SELECT pg_wal_replay_pause()`); err != nil {
		return nil, fmt.Errorf("topology: pausing replay on %s: %w", s.Name, err)
	}
	return func(ctx context.Context) error { return run(ctx, `SELECT pg_wal_replay_resume()`) }, nil
}

// Fail kills the primary's pg_autoctl and PostgreSQL with SIGKILL (its whole
// process group, so that nothing restarts it), waits for the monitor to
// promote the standby and for the new primary to take writes, and says how
// long each took. It implements the chaos harness's failover fault.
func (f *Formation) Fail(ctx context.Context) (string, error) {
	st, err := f.State(ctx)
	if err != nil {
		return "", err
	}
	p := Primary(st)
	if p == nil {
		return "", errors.New("topology: no primary to kill")
	}
	var victim *node
	for _, n := range f.nodes {
		if n.name == p.Name {
			victim = n
		}
	}
	if victim == nil {
		return "", fmt.Errorf("topology: the primary %s is not a node of this formation", p.Name)
	}
	killed := time.Now()
	victim.kill()
	st, err = f.waitState(ctx, 3*time.Minute, func(st []NodeState) bool {
		q := Primary(st)
		return q != nil && q.Name != victim.name
	})
	if err != nil {
		return "", err
	}
	promoted := time.Since(killed)
	writable, err := f.waitWritable(ctx, time.Minute)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("killed %s (SIGKILL to pg_autoctl and PostgreSQL); %s promoted after %s, taking writes after %s",
		victim.name, Primary(st).Name, promoted.Round(100*time.Millisecond), (promoted + writable).Round(100*time.Millisecond)), nil
}

// waitWritable waits until a connection through URL lands on a node that
// is not in recovery, and returns how long it waited.
func (f *Formation) waitWritable(ctx context.Context, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		conn, err := pgx.Connect(cctx, f.URL())
		if err == nil {
			var recovery bool
			err = conn.QueryRow(cctx, `SELECT pg_is_in_recovery()`).Scan(&recovery)
			conn.Close(cctx)
			if err == nil && !recovery {
				cancel()
				return time.Since(start), nil
			}
		}
		cancel()
		if time.Since(start) > limit {
			return 0, fmt.Errorf("topology: no writable node after %s: %v", limit, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (f *Formation) waitState(ctx context.Context, limit time.Duration, ok func([]NodeState) bool) ([]NodeState, error) {
	deadline := time.Now().Add(limit)
	var st []NodeState
	var err error
	for {
		st, err = f.State(ctx)
		if err == nil && ok(st) {
			return st, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("topology: the formation did not reach the expected state within %s (last: %+v, %v); logs in %s",
				limit, st, err, f.dir)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Stop stops every pg_autoctl of the formation (SIGTERM, which stops its
// PostgreSQL; SIGKILL to the process group after 20s) and removes its
// directory.
func (f *Formation) Stop() error {
	var wg sync.WaitGroup
	for _, n := range append([]*node{f.monitor}, f.nodes...) {
		if n == nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); n.stop() }()
	}
	wg.Wait()
	return os.RemoveAll(f.dir)
}

func (f *Formation) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "pg_autoctl", args...)
	cmd.Env = f.env
	cmd.Dir = f.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred}
	return cmd
}

func (f *Formation) autoctl(ctx context.Context, args ...string) error {
	_, err := f.autoctlOutput(ctx, args...)
	return err
}

func (f *Formation) autoctlOutput(ctx context.Context, args ...string) ([]byte, error) {
	cmd := f.command(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("topology: pg_autoctl %s: %w\n%s", strings.Join(args, " "), err, tail(stderr.Bytes(), 20))
	}
	return stdout.Bytes(), nil
}

// start runs `pg_autoctl run` for n in a process group of its own, which
// gets SIGTERM if this process dies.
func (f *Formation) start(n *node) error {
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command("pg_autoctl", "run", "--pgdata", n.pgdata)
	cmd.Env, cmd.Dir = f.env, f.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred, Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("topology: pg_autoctl run %s: %w", n.name, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	return nil
}

func (n *node) take() (*exec.Cmd, chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	cmd, exited := n.cmd, n.exited
	n.cmd, n.exited = nil, nil
	return cmd, exited
}

// kill sends SIGKILL to n's process group: pg_autoctl, PostgreSQL and its
// backends.
func (n *node) kill() {
	if cmd, exited := n.take(); cmd != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

func (n *node) stop() {
	cmd, exited := n.take()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	// PostgreSQL stops with its pg_autoctl; one left behind is killed.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

func (f *Formation) chown(path string) error {
	if f.cred == nil {
		return nil
	}
	return os.Chown(path, int(f.cred.Uid), int(f.cred.Gid))
}

func appendConf(pgdata string, settings []Setting) error {
	fh, err := os.OpenFile(filepath.Join(pgdata, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fh.WriteString(confLines(settings))
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return err
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tail returns the last n lines of b.
func tail(b []byte, n int) []byte {
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return bytes.Join(lines, []byte("\n"))
}
