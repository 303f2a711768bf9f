package gen

import (
	"os"
	"path/filepath"
	"strings"
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
	cfg.Spec = filepath.Join(dir, "api.yaml")
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	in, err := Load(cfg, "")
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

// TestMiddlewareOrderFollowsTheConfig: oapi-codegen applies the net/http,
// chi and gorilla servers' Middlewares in order (the first innermost), or,
// with apply-chi- and apply-gorilla-middleware-first-to-last, last to first
// (the last innermost); the idempotency middleware is placed to be
// innermost either way.
func TestMiddlewareOrderFollowsTheConfig(t *testing.T) {
	for _, c := range []struct {
		srv, compat string
		want        string
	}{
		{"chi-server", "", "append([]MiddlewareFunc{idempotency}, options.Middlewares...)"},
		{"chi-server", "apply-chi-middleware-first-to-last", "append(append([]MiddlewareFunc{}, options.Middlewares...), idempotency)"},
		{"std-http-server", "apply-chi-middleware-first-to-last", "append(append([]MiddlewareFunc{}, options.Middlewares...), idempotency)"},
		{"gorilla-server", "apply-gorilla-middleware-first-to-last", "append(append([]MiddlewareFunc{}, options.Middlewares...), idempotency)"},
	} {
		dir := t.TempDir()
		if err := os.CopyFS(dir, os.DirFS(filepath.Join(goldenDir, "chi_server"))); err != nil {
			t.Fatal(err)
		}
		config := "package: api\noutput: api.gen.go\ngenerate: {models: true, " + c.srv + ": true, strict-server: true}\n"
		if c.compat != "" {
			config += "compatibility: {" + c.compat + ": true}\n"
		}
		if err := os.WriteFile(filepath.Join(dir, "idemgen.yaml"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		files, err := generateCase(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		if glue := string(files[GlueFile]); !strings.Contains(glue, "Middlewares:      "+c.want) {
			t.Errorf("%s with %q: the glue's Middlewares are not %s:\n%s", c.srv, c.compat, c.want, glue[strings.Index(glue, "return HandlerWithOptions"):])
		}
	}
}
