package topology

import (
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMultiHostURL(t *testing.T) {
	got := MultiHostURL("postgres", "chaos", []string{"127.0.0.1:5001", "127.0.0.1:5002"},
		url.Values{"target_session_attrs": {"read-write"}, "sslmode": {"disable"}})
	want := "postgres://postgres@127.0.0.1:5001,127.0.0.1:5002/chaos?sslmode=disable&target_session_attrs=read-write"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// pgx reads it as two hosts that must accept writes.
	cfg, err := pgx.ParseConfig(got)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "127.0.0.1" || cfg.Port != 5001 || len(cfg.Fallbacks) != 1 || cfg.Fallbacks[0].Port != 5002 ||
		cfg.Database != "chaos" || cfg.ValidateConnect == nil {
		t.Fatalf("pgx config: host %s:%d, fallbacks %d, database %s, validate %v", cfg.Host, cfg.Port, len(cfg.Fallbacks),
			cfg.Database, cfg.ValidateConnect != nil)
	}
}

// state is `pg_autoctl show state --json` after the primary node1 was
// killed and node2 promoted (pg_auto_failover 2.0).
const state = `[
    {"health": 0, "node_id": 1, "group_id": 0, "nodehost": "127.0.0.1", "nodename": "node1", "nodeport": 16101,
     "reported_lsn": "0/3000110", "reported_tli": 1, "current_group_state": "primary", "assigned_group_state": "demoted"},
    {"health": 1, "node_id": 2, "group_id": 0, "nodehost": "127.0.0.1", "nodename": "node2", "nodeport": 16102,
     "reported_lsn": "0/264FABB8", "reported_tli": 2, "current_group_state": "wait_primary", "assigned_group_state": "wait_primary"}
]`

func TestParseState(t *testing.T) {
	st, err := ParseState([]byte(state))
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 || st[1].Port != 16102 || st[1].TLI != 2 || st[0].Health != 0 {
		t.Fatalf("parsed %+v", st)
	}
	// node1 still reports primary but is assigned demoted: not a primary.
	if p := Primary(st); p == nil || p.Name != "node2" {
		t.Fatalf("primary %+v, want node2", p)
	}
	if s := Secondary(st); s != nil {
		t.Fatalf("secondary %+v, want none", s)
	}
	st[0].Current, st[0].Assigned = "secondary", "secondary"
	if s := Secondary(st); s == nil || s.Name != "node1" {
		t.Fatalf("secondary %+v, want node1", s)
	}
	if _, err := ParseState([]byte("pg_autoctl: no such node")); err == nil {
		t.Fatal("garbage parsed")
	}
}

func TestBouncerConfig(t *testing.T) {
	ini := BouncerConfig{ListenPort: 6432, UpstreamHost: "127.0.0.1", UpstreamPort: 5432, Dir: "/tmp/b", PoolSize: 20,
		MaxClientConn: 1000, ServerIdleTimeout: 60, ServerLoginRetry: 1, QueryWaitTimeoutMS: 30000}.Render()
	for _, line := range []string{
		"* = host=127.0.0.1 port=5432", "pool_mode = transaction", "listen_addr = 127.0.0.1", "listen_port = 6432",
		"unix_socket_dir =", "auth_type = trust", "auth_file = /tmp/b/users.txt", "default_pool_size = 20",
		"query_wait_timeout = 30", "logfile = /tmp/b/pgbouncer.log",
	} {
		if !strings.Contains(ini, "\n"+line+"\n") {
			t.Errorf("pgbouncer.ini lacks %q:\n%s", line, ini)
		}
	}
	if strings.Index(ini, "[databases]") > strings.Index(ini, "[pgbouncer]") {
		t.Error("sections out of order")
	}
}

func TestPackages(t *testing.T) {
	pkgs := Packages("/usr/lib/postgresql/15/bin")
	var names []string
	for _, p := range pkgs {
		names = append(names, p.Name)
	}
	if strings.Join(names, " ") != "postgresql-15-auto-failover pg-auto-failover-cli pgbouncer" ||
		pkgs[0].File != "/usr/lib/postgresql/15/lib/pgautofailover.so" {
		t.Fatalf("packages %+v", pkgs)
	}
	missing := Missing(pkgs, func(f string) bool { return !strings.Contains(f, "pgbouncer") })
	if len(missing) != 1 || missing[0] != "pgbouncer" {
		t.Fatalf("missing %v", missing)
	}
	if got := InstallLine([]string{"postgresql-15-auto-failover", "pgbouncer"}); got != "apt-get install -y postgresql-15-auto-failover pgbouncer" {
		t.Fatalf("install line %q", got)
	}
}

func TestConfLines(t *testing.T) {
	got := confLines([]Setting{{"shared_buffers", "'64MB'"}, {"pgautofailover.health_check_period", "1000"}})
	if !strings.Contains(got, "\nshared_buffers = '64MB'\npgautofailover.health_check_period = 1000\n") {
		t.Fatalf("conf lines %q", got)
	}
}

const goTestOutput = `--- FAIL: TestConcurrentSameKey (0.96s)
    engine_test.go:166: round 0: unexpected error unavailable: ERROR: prepared statement "stmtcache_6e" already exists (SQLSTATE 42P05)
--- FAIL: TestPrune (1.71s)
    maintain_test.go:52: claim during prune: ERROR: prepared statement "stmtcache_ea" does not exist (SQLSTATE 26000)
FAIL
FAIL	github.com/idemgen/idemgen/runtime/idem	75.149s
ok  	github.com/idemgen/idemgen/runtime/idemecho	15.106s
FAIL	github.com/idemgen/idemgen/examples/payments/api [build failed]
`

func TestParseGoTest(t *testing.T) {
	res, failed := ParseGoTest(goTestOutput)
	if failed != 2 || len(res) != 3 {
		t.Fatalf("%d failed, results %+v", failed, res)
	}
	if res[0].OK || res[0].Package != "github.com/idemgen/idemgen/runtime/idem" || res[0].Elapsed != "75.149s" ||
		strings.Join(res[0].Failed, ",") != "TestConcurrentSameKey,TestPrune" {
		t.Errorf("first %+v", res[0])
	}
	if !res[1].OK || len(res[1].Failed) != 0 || res[2].OK {
		t.Errorf("others %+v", res[1:])
	}
	want := "  FAIL  github.com/idemgen/idemgen/runtime/idem: TestConcurrentSameKey, TestPrune\n" +
		"  ok    github.com/idemgen/idemgen/runtime/idemecho (15.106s)\n" +
		"  FAIL  github.com/idemgen/idemgen/examples/payments/api: \n"
	if got := Summary(res); got != want {
		t.Errorf("summary:\n%s\nwant:\n%s", got, want)
	}
}
