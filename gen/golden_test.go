package gen

import (
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/idemgen/idemgen/internal/testshort"
)

var update = flag.Bool("update", false, "rewrite the golden files from the generator's output")

const goldenDir = "../golden"

// goldenCases lists the case folders: each holds api.yaml and idemgen.yaml,
// and either out/ (the expected files) or stderr.txt (the expected errors).
func goldenCases(t testing.TB) []string {
	t.Helper()
	entries, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	var cases []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(goldenDir, e.Name(), "idemgen.yaml")); err == nil {
			cases = append(cases, e.Name())
		}
	}
	if len(cases) < 12 {
		t.Fatalf("only %d golden cases", len(cases))
	}
	return cases
}

func caseConfig(t testing.TB, dir string) Config {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "idemgen.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Spec: filepath.Join(dir, "api.yaml")}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch strings.TrimSpace(k) {
		case "package":
			cfg.Package = strings.TrimSpace(v)
		case "openapi-out":
			cfg.OpenAPIOut = strings.TrimSpace(v)
		case "client-out":
			cfg.ClientOut = strings.TrimSpace(v)
		case "client-package":
			cfg.ClientPackage = strings.TrimSpace(v)
		}
	}
	return cfg
}

// TestGolden regenerates every case in memory and compares it byte for byte
// with the files in the case folder. go test ./gen -run TestGolden -update
// (make golden) rewrites them.
func TestGolden(t *testing.T) {
	for _, name := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(goldenDir, name)
			cfg := caseConfig(t, dir)
			res, err := Generate(cfg)
			stderrFile := filepath.Join(dir, "stderr.txt")
			if err != nil {
				got := strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "") + "\n"
				if *update {
					os.RemoveAll(filepath.Join(dir, "out"))
					if err := os.WriteFile(stderrFile, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, rerr := os.ReadFile(stderrFile)
				if rerr != nil {
					t.Fatalf("generation failed and there is no stderr.txt: %v", err)
				}
				if diff := cmp.Diff(string(want), got); diff != "" {
					t.Fatalf("errors differ (-want +got):\n%s", diff)
				}
				return
			}
			if _, serr := os.Stat(stderrFile); serr == nil && !*update {
				t.Fatal("generation succeeded but stderr.txt expects errors")
			}
			out := filepath.Join(dir, "out")
			if *update {
				os.Remove(stderrFile)
				os.RemoveAll(out)
				if err := os.MkdirAll(out, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			var gotNames []string
			for _, f := range res.Files {
				gotNames = append(gotNames, f.Path)
				path := filepath.Join(out, f.Path)
				if *update {
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, f.Data, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Errorf("%s: generated but not in the golden case: %v", f.Path, err)
					continue
				}
				if diff := cmp.Diff(string(want), string(f.Data)); diff != "" {
					t.Errorf("%s differs (-want +got):\n%s", f.Path, diff)
				}
			}
			var wantNames []string
			filepath.WalkDir(out, func(path string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(out, path)
					wantNames = append(wantNames, rel)
				}
				return nil
			})
			sort.Strings(gotNames)
			if diff := cmp.Diff(wantNames, gotNames); diff != "" {
				t.Errorf("file sets differ (-golden +generated):\n%s", diff)
			}
		})
	}
}

// TestGoldenDeterministic: two runs give identical bytes.
func TestGoldenDeterministic(t *testing.T) {
	cfg := caseConfig(t, filepath.Join(goldenDir, "all_fields"))
	a, err := Generate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		b, err := Generate(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(a, b); diff != "" {
			t.Fatalf("run %d differs:\n%s", i, diff)
		}
	}
}

// TestGoldenCompiles vets the golden module: every valid case's output,
// scaffolds included, must compile.
func TestGoldenCompiles(t *testing.T) {
	testshort.Long(t)
	if *update {
		t.Skip("the golden files are being rewritten")
	}
	cmd := exec.Command("go", "vet", "./...")
	cmd.Dir = goldenDir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go vet in golden/: %v\n%s", err, out)
	}
}
