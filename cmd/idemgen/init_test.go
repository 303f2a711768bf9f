package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/gen"
)

// TestInit writes the starter files, checks that generate accepts the config
// as written, and that a second init keeps what the user changed.
func TestInit(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "api")
	specData, err := os.ReadFile("../../golden/minimal_true/api.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "openapi.yaml"), specData, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCLI(t, "init", "-dir", dir, "-spec", filepath.Join(root, "openapi.yaml"))
	if code != 0 {
		t.Fatalf("init: exit %d: %s", code, errs)
	}
	for _, f := range []string{initConfig, initGenerate} {
		if !strings.Contains(errs, filepath.Join(dir, f)) {
			t.Errorf("init did not report writing %s:\n%s", f, errs)
		}
	}
	if strings.Contains(errs, "does not exist") {
		t.Errorf("init warned about an existing spec:\n%s", errs)
	}

	cfg, err := gen.LoadConfig(filepath.Join(dir, initConfig))
	if err != nil {
		t.Fatalf("generate's loader rejects the starter config: %v", err)
	}
	if cfg.Package() != "api" || cfg.Output != filepath.Join(dir, "api.gen.go") || !cfg.Codegen.Generate.EchoServer || !cfg.Codegen.Generate.Strict || !cfg.Codegen.Generate.Models {
		t.Errorf("starter config reads as %+v", cfg)
	}
	src, _ := os.ReadFile(filepath.Join(dir, initGenerate))
	for _, want := range []string{"package api\n", "\n//go:generate go tool idemgen generate -config idemgen.yaml ../openapi.yaml\n"} {
		if !strings.Contains(string(src), want) {
			t.Errorf("generate.go lacks %q:\n%s", want, src)
		}
	}
	// What go generate will run, run in-process from the package directory.
	t.Chdir(dir)
	if code, _, errs := runCLI(t, "generate", "-config", "idemgen.yaml", "../openapi.yaml"); code != 0 {
		t.Fatalf("generate -config with the starter config: exit %d: %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "idempotency.gen.go")); err != nil {
		t.Errorf("generate wrote no glue next to the config: %v", err)
	}

	// The user edits both files; init again overwrites neither and says so.
	mine := map[string]string{initConfig: "package: api\noutput: server.gen.go\n# mine\n", initGenerate: "package api\n\n// mine\n"}
	for f, data := range mine {
		os.WriteFile(filepath.Join(dir, f), []byte(data), 0o644)
	}
	code, _, errs = runCLI(t, "init", "-dir", dir, "-spec", filepath.Join(root, "openapi.yaml"))
	if code != 0 {
		t.Fatalf("second init: exit %d: %s", code, errs)
	}
	for f, data := range mine {
		if got, _ := os.ReadFile(filepath.Join(dir, f)); string(got) != data {
			t.Errorf("second init overwrote %s:\n%s", f, got)
		}
		if !strings.Contains(errs, "kept      "+filepath.Join(dir, f)+" (yours") {
			t.Errorf("second init did not say it kept %s:\n%s", f, errs)
		}
	}
}

func TestInitRefusals(t *testing.T) {
	root := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-dir", filepath.Join(root, "my-api")}, `directory name "my-api" is not a Go package name; pass -package`},
		{[]string{"-dir", root, "-package", "func"}, `-package "func" is not a Go package name`},
		{[]string{"-dir", root, "-package", "api", "-spec", filepath.Join(root, "a b.yaml")}, "cannot stand in a go:generate line"},
	} {
		code, _, errs := runCLI(t, append([]string{"init"}, tc.args...)...)
		if code != 1 || !strings.Contains(errs, tc.want) {
			t.Errorf("init %v: exit %d, %q; want 1 and %q", tc.args, code, errs, tc.want)
		}
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("a refused init wrote %v", entries)
	}
	// A spec that is not there yet is fine, but init says so.
	code, _, errs := runCLI(t, "init", "-dir", root, "-package", "api", "-spec", filepath.Join(root, "api.yaml"))
	if code != 0 || !strings.Contains(errs, "does not exist yet") {
		t.Errorf("init before the spec exists: exit %d, %q", code, errs)
	}
}
