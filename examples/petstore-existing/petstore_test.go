package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/examples/petstore-existing/api"
	"github.com/idemgen/idemgen/examples/petstore-existing/petstore"
	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/internal/tempmod"
	"github.com/idemgen/idemgen/internal/testshort"
)

func TestMain(m *testing.M) { idemtest.Main(m) }

func do(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestPetstore: the service before idempotency, as docs/adopting.md starts
// from it. A retried delete is a 404, a retried add a second pet.
func TestPetstore(t *testing.T) {
	pool, _ := idemtest.Pool(t)
	if _, err := pool.Exec(context.Background(), petstore.Schema); err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	api.RegisterHandlers(e, api.NewStrictHandler(&petstore.Server{Pool: pool}, nil))
	srv := httptest.NewServer(e)
	defer srv.Close()

	var pets [2]api.Pet
	for i := range pets {
		code, body := do(t, "POST", srv.URL+"/pets", `{"name":"Rex","tag":"dog"}`)
		if code != 200 || json.Unmarshal([]byte(body), &pets[i]) != nil {
			t.Fatalf("add: %d %s", code, body)
		}
	}
	if pets[0].Id == pets[1].Id {
		t.Errorf("a retried add made no second pet: %+v", pets)
	}
	if code, body := do(t, "GET", srv.URL+"/pets?tags=dog&limit=1", ""); code != 200 || strings.Count(body, `"name":"Rex"`) != 1 {
		t.Errorf("find: %d %s", code, body)
	}
	if code, _ := do(t, "DELETE", srv.URL+"/pets/"+itoa(pets[0].Id), ""); code != 204 {
		t.Errorf("delete: %d", code)
	}
	if code, body := do(t, "DELETE", srv.URL+"/pets/"+itoa(pets[0].Id), ""); code != 404 || !strings.Contains(body, "Could not find pet") {
		t.Errorf("a retried delete: %d %s; want 404", code, body)
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestAdoptingGuide runs every command of docs/adopting.md, which copies
// this service into a module of its own, adds x-idempotency to two
// operations, runs oapi-codegen as the service always did and then idemgen
// -glue-only, fills in the phases, builds and serves it, and checks the
// replays with curl.
func TestAdoptingGuide(t *testing.T) {
	testshort.Long(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("the guide's commands need curl: install it (apt-get install curl)")
	}
	root := tempmod.Root()
	cmd := exec.Command(filepath.Join(root, "scripts", "docs-check.sh"), "-q", filepath.Join(root, "docs", "adopting.md"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s", out)
}
