package demo

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/testshort"
)

// TestStory runs the whole `make demo` scenario against the real service
// binary and PostgreSQL; every step asserts what it shows.
func TestStory(t *testing.T) {
	testshort.Long(t)
	bin := filepath.Join(t.TempDir(), "payments")
	if out, err := exec.Command("go", "build", "-race", "-o", bin, "../cmd/payments").CombinedOutput(); err != nil {
		t.Fatalf("building the service: %v\n%s", err, out)
	}
	var out bytes.Buffer
	tally, err := Run(context.Background(), Config{Server: bin, Out: &out, Dir: t.TempDir()})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if tally.Intents != 4 || tally.Succeeded != 3 || tally.Payments != 3 || tally.Charges != 3 || tally.Emails != 3 ||
		tally.Events != 3 || tally.Applied != 3 || tally.Deliveries < 6 {
		t.Fatalf("tally %+v", *tally)
	}
	for _, want := range []string{"Idempotent-Replayed: true", "422 Unprocessable Entity", "waits on the server for the first", "402 Payment Required", "kill -9", "the client retries in",
		"POST /webhooks/cardnet", "(the same event again)", "401 Unauthorized"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the story never shows %q", want)
		}
	}
}
