package gen

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestGenerateReadsNothing: Load reads the spec once, and Generate renders
// everything from what Load read, the enriched copy of the spec and the
// client included: with the case's folder gone, it still produces the
// golden files.
func TestGenerateReadsNothing(t *testing.T) {
	const name = "body_pointer" // an enriched copy, a client, a body key
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(goldenDir, name))); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(filepath.Join(dir, "idemgen.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Spec = "api.yaml"
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	in, err := Load(cfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	in.OapiCodegen = linkedOapiCodegen()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	res, err := Generate(cfg, in)
	if err != nil {
		t.Fatalf("Generate after the inputs were removed: %v", err)
	}
	if len(res.Files) < 5 {
		t.Fatalf("only %d files", len(res.Files))
	}
	for _, f := range res.Files {
		want, err := os.ReadFile(filepath.Join(goldenDir, name, "out", f.Path))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(want), string(f.Data)); diff != "" {
			t.Errorf("%s differs from the golden file (-want +got):\n%s", f.Path, diff)
		}
	}
}
