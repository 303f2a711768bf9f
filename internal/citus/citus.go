// Package citus starts a Citus cluster (distributed PostgreSQL: a
// coordinator and workers) from the PostgreSQL server binaries on this
// machine, for `make citus`: each node a throwaway pglocal cluster with
// Citus preloaded, listening on a loopback port, the workers added to the
// coordinator. Citus itself must be installed into that PostgreSQL
// (Installed, Install).
package citus

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/pglocal"
)

// Library is where the Citus extension's library is for the PostgreSQL
// whose binaries are in binDir (/usr/lib/postgresql/15/bin:
// /usr/lib/postgresql/15/lib/citus.so).
func Library(binDir string) string {
	return filepath.Join(filepath.Dir(binDir), "lib", "citus.so")
}

// Installed reports whether Citus is installed into the local PostgreSQL.
func Installed() (bool, string, error) {
	bin, err := pglocal.BinDir()
	if err != nil {
		return false, "", err
	}
	lib := Library(bin)
	_, err = os.Stat(lib)
	return err == nil, lib, nil
}

// Ensure makes sure Citus is installed: it is, or src (CITUS_SRC, a
// directory with the project's install.sh and Citus' source tarball) is
// given and its install.sh installs it (root; about ten minutes, its
// progress on out). Otherwise the error says how to install it.
func Ensure(ctx context.Context, src string, out io.Writer) error {
	ok, lib, err := Installed()
	if err != nil || ok {
		return err
	}
	if src == "" {
		return fmt.Errorf("citus: Citus is not installed (no %s). Install Citus' package for this PostgreSQL (postgresql-15-citus-13.2 or later), "+
			"or give a directory whose install.sh builds and installs it: CITUS_SRC=<dir> make citus", lib)
	}
	script := filepath.Join(src, "install.sh")
	if _, err := os.Stat(script); err != nil {
		return fmt.Errorf("citus: CITUS_SRC=%s has no install.sh: %w", src, err)
	}
	fmt.Fprintf(out, "citus: installing Citus with %s (about ten minutes on 2 cores)\n", script)
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("citus: %s: %w", script, err)
	}
	if ok, _, _ := Installed(); !ok {
		return fmt.Errorf("citus: %s ran, and %s is still missing", script, lib)
	}
	return nil
}

// Options configure a cluster.
type Options struct {
	Workers int  // default 2
	Durable bool // fsync and synchronous commit on, for measurements
	// Settings are extra server settings for every node.
	Settings map[string]string
	Log      io.Writer // the servers' output; nil discards it
	// CPUQuota, when above 0, bounds each worker's PostgreSQL to that many
	// CPUs, the same for every worker, with a cgroup (v1's cpu controller,
	// cpu.cfs_quota_us): a machine's few cores shared as workers of equal
	// size, so that capacity grows with the workers as it would with
	// machines. The coordinator is not bounded.
	CPUQuota float64
}

// Cluster is a running Citus cluster.
type Cluster struct {
	Coordinator *pglocal.Cluster
	Workers     []*pglocal.Cluster
	cgroups     []string // the workers' cgroups (Options.CPUQuota), removed by Stop
}

// cgroupRoot is where cgroup v1's cpu controller is mounted.
const cgroupRoot = "/sys/fs/cgroup/cpu"

// bound puts worker i's server and every process it forks from now on in
// a cgroup of its own with quota CPUs.
func (c *Cluster) bound(i int, quota float64) error {
	dir := filepath.Join(cgroupRoot, fmt.Sprintf("idemgen-citus-%d-%d", os.Getpid(), i))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("citus: a cgroup for worker %d (CPUQuota needs cgroup v1's cpu controller at %s, and root): %w", i+1, cgroupRoot, err)
	}
	c.cgroups = append(c.cgroups, dir)
	const period = 100000 // microseconds
	for file, v := range map[string]int{"cpu.cfs_period_us": period, "cpu.cfs_quota_us": int(quota * period)} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.Itoa(v)), 0o644); err != nil {
			return fmt.Errorf("citus: %s of worker %d: %w", file, i+1, err)
		}
	}
	pm, err := os.ReadFile(filepath.Join(c.Workers[i].DataDir(), "postmaster.pid"))
	if err != nil {
		return err
	}
	server := strings.TrimSpace(strings.SplitN(string(pm), "\n", 2)[0])
	// The server and its processes already running; backends forked later
	// are put in their parent's cgroup.
	pids := []string{server}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, not ')'.
		if fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(fields) > 1 && fields[1] == server {
			pids = append(pids, filepath.Base(filepath.Dir(f)))
		}
	}
	for _, pid := range pids {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0o644); err != nil && pid == server {
			return fmt.Errorf("citus: moving worker %d into its cgroup: %w", i+1, err)
		}
	}
	return nil
}

// DB is the database the cluster is set up in: Citus keeps its nodes and
// extension per database.
const DB = "postgres"

// Start starts a coordinator and opts.Workers workers, creates the Citus
// extension on each and adds the workers to the coordinator, by their
// loopback addresses.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	settings := map[string]string{
		"shared_preload_libraries": "citus",
		// Each coordinator backend opens connections to the workers.
		"max_connections": "600",
		// Citus commits a transaction that wrote on two nodes in two phases.
		"max_prepared_transactions": "300",
		// The nodes talk over loopback, without TLS: libpq would otherwise
		// look for client certificates in the home of the user who started
		// the server, which the server's own user may not read.
		"citus.node_conninfo": "sslmode=disable",
		// A worker killed mid-round keeps every commit it acknowledged,
		// durable or not (pglocal.Cluster.Kill).
		"synchronous_commit": "on",
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	node := pglocal.Options{TCPPort: -1, Durable: opts.Durable, Settings: settings, Log: opts.Log}
	c := &Cluster{}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if c.Coordinator, err = pglocal.Start(ctx, node); err != nil {
		return nil, fmt.Errorf("citus: coordinator: %w", err)
	}
	for i := range opts.Workers {
		w, err := pglocal.Start(ctx, node)
		if err != nil {
			return nil, fmt.Errorf("citus: worker %d: %w", i+1, err)
		}
		c.Workers = append(c.Workers, w)
	}
	for _, n := range c.nodes() {
		if err := exec1(ctx, n.URL(DB), `CREATE EXTENSION IF NOT EXISTS citus`); err != nil {
			return nil, fmt.Errorf("citus: CREATE EXTENSION citus on %s: %w", n.TCPAddr(), err)
		}
	}
	host, port := splitAddr(c.Coordinator.TCPAddr())
	if err := exec1(ctx, c.URL(), `SELECT citus_set_coordinator_host($1, $2)`, host, port); err != nil {
		return nil, fmt.Errorf("citus: citus_set_coordinator_host: %w", err)
	}
	for _, w := range c.Workers {
		host, port := splitAddr(w.TCPAddr())
		if err := exec1(ctx, c.URL(), `SELECT citus_add_node($1, $2)`, host, port); err != nil {
			return nil, fmt.Errorf("citus: citus_add_node %s: %w", w.TCPAddr(), err)
		}
	}
	if opts.CPUQuota > 0 {
		for i := range c.Workers {
			if err := c.bound(i, opts.CPUQuota); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

func (c *Cluster) nodes() []*pglocal.Cluster {
	return append([]*pglocal.Cluster{c.Coordinator}, c.Workers...)
}

// URL is the coordinator's connection URL (its unix socket).
func (c *Cluster) URL() string { return c.Coordinator.URL(DB) }

// KillWorker ends worker i as a crash would (SIGKILL to all its processes).
func (c *Cluster) KillWorker(i int) { c.Workers[i].Kill() }

// RestartWorker starts worker i again after KillWorker (or stops and
// starts it), recovering from its WAL.
func (c *Cluster) RestartWorker(ctx context.Context, i int) error {
	return c.Workers[i].Restart(ctx)
}

// Stop stops every node and removes its files and cgroups.
func (c *Cluster) Stop() {
	for _, n := range c.nodes() {
		if n != nil {
			n.Stop()
		}
	}
	for _, dir := range c.cgroups {
		os.Remove(dir)
	}
}

// WorkerOf returns the index of the worker that holds the shard of table
// (schema-qualified) where distribution value v (as text) goes.
func (c *Cluster) WorkerOf(ctx context.Context, table, v string) (int, error) {
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var port int
	err = conn.QueryRow(ctx, `SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n ON n.groupid = p.groupid
WHERE p.shardid = get_shard_id_for_distribution_column($1::regclass, $2::text)`, table, v).Scan(&port)
	if err != nil {
		return 0, fmt.Errorf("citus: the worker of %s = %s: %w", table, v, err)
	}
	for i, w := range c.Workers {
		if _, p := splitAddr(w.TCPAddr()); p == port {
			return i, nil
		}
	}
	return 0, fmt.Errorf("citus: no worker on port %d", port)
}

func exec1(ctx context.Context, url, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

func splitAddr(addr string) (string, int) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return addr, 0
	}
	p, _ := strconv.Atoi(addr[i+1:])
	return addr[:i], p
}
