package dbtest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// childEnv marks the re-executed test binary of TestMainOpensNothingUnasked.
const childEnv = "IDEMGEN_DBTEST_CHILD"

// TestMainOpensNothingUnasked runs this test binary again with only a test
// that needs no database, and DATABASE_URL naming a server that is not
// there. Main must not open the database before a test asks for it: a fuzz
// run (-run '^$') and each of its workers execute TestMain too, and a
// throwaway cluster started in each starved the fuzz workers on two cores.
func TestMainOpensNothingUnasked(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		return // the child: asks for no database
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMainOpensNothingUnasked$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1",
		"DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("a run that asks for no database failed without one: %v\n%s", err, out)
	}
}

// TestNoDatabaseSaysHowToFix is the other half: a test that asks for the
// database when none can be had fails with the fix, and no other test does.
func TestNoDatabaseSaysHowToFix(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		Pool(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoDatabaseSaysHowToFix$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1",
		"DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("a test that needs the database passed without one:\n%s", out)
	}
	if !strings.Contains(string(out), "Fix: ") {
		t.Errorf("the failure does not say how to fix it:\n%s", out)
	}
}

func TestPoolIsUsable(t *testing.T) {
	pool, schema := Pool(t)
	var got string
	if err := pool.QueryRow(t.Context(), "SELECT current_schema()").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != schema {
		t.Errorf("current_schema() = %q, want %q", got, schema)
	}
}
