package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/internal/childproc"
)

// TestDefaultDatabaseSurvivesARestart: without DATABASE_URL the service
// keeps its records in a local PostgreSQL whose data outlives it, so a
// retry after kill -9 and a restart is replayed, not executed again.
func TestDefaultDatabaseSurvivesARestart(t *testing.T) {
	// Not t.TempDir, whose mode 0700 the postgres user cannot traverse when
	// the test runs as root: the data would go to that user's home.
	dir, err := os.MkdirTemp("", "payments-restart-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "payments")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the service: %v\n%s", err, out)
	}
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	svc := &childproc.Process{Name: "payments", Bin: bin, Dir: work, Log: filepath.Join(dir, "payments.log"),
		Args: []string{"-addr", "127.0.0.1:0", "-mail-sink", filepath.Join(dir, "mail.jsonl")},
		Env:  []string{"DATABASE_URL="}} // the default, whatever the test's environment says
	t.Cleanup(svc.Stop) // before the directory is removed

	pay := func() (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+svc.Addr()+"/payments",
			strings.NewReader(`{"amount": 1000, "currency": "EUR", "customer": "ada@example.com"}`))
		req.Header.Set("Authorization", "Bearer acct_ada")
		req.Header.Set("Idempotency-Key", "order-1")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(body)
	}
	if err := svc.Start(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	status, _, first := pay()
	if status != http.StatusCreated {
		t.Fatalf("the payment: %d %s", status, first)
	}
	svc.Kill()
	svc.Args[1] = svc.Addr()
	if err := svc.Start(60 * time.Second); err != nil {
		log, _ := os.ReadFile(svc.Log)
		t.Fatalf("restarting: %v\n%s", err, log)
	}
	status, header, again := pay()
	if status != http.StatusCreated || again != first || header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry after a restart: %d %q (replayed %q); want the first answer, %q, replayed", status, again, header.Get("Idempotent-Replayed"), first)
	}
	log, _ := os.ReadFile(svc.Log)
	if !strings.Contains(string(log), `"dir":"`+filepath.Join(work, ".idemgen", "postgres")+`"`) {
		t.Errorf("the log does not say where the records are kept:\n%s", log)
	}
}
