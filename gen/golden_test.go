package gen

import (
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/idemgen/idemgen/internal/testshort"
)

var update = flag.Bool("update", false, "rewrite the golden files from the generator's output")

const goldenDir = "../golden"

// A golden case is a folder holding a spec and a config, and either out/
// (the expected files) or stderr.txt (the expected errors). Each config is
// one run of `idemgen generate -config CONFIG SPEC` in the folder:
// idemgen.yaml with api.yaml, and idemgen.NAME.yaml, if any, with
// NAME.yaml (a spec split over files whose second part is generated on its
// own, as oapi-codegen's import mapping to "-" asks). The files of every run
// go to out/, under the directory of the run's output.

// goldenCases lists the case folders.
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

// goldenRun is one config of a case and its spec.
type goldenRun struct{ config, spec string }

func caseRuns(t testing.TB, dir string) []goldenRun {
	t.Helper()
	runs := []goldenRun{{"idemgen.yaml", "api.yaml"}}
	more, err := filepath.Glob(filepath.Join(dir, "idemgen.*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(more)
	for _, m := range more {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m), "idemgen."), ".yaml")
		runs = append(runs, goldenRun{filepath.Base(m), name + ".yaml"})
	}
	return runs
}

// linkedOapiCodegen is the oapi-codegen version in generated headers. Test
// binaries carry no module versions, so it is read from go.mod, which pins
// the version linked.
var linkedOapiCodegen = sync.OnceValue(func() string {
	data, err := os.ReadFile("../go.mod")
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == oapiCodegenModule {
			return f[1]
		}
	}
	panic("go.mod does not require " + oapiCodegenModule)
})

// generateCase runs every config of the case in dir, as the idemgen command
// does when run in dir (the config's paths are relative to its own
// directory, the spec's to the working directory), and returns the files by
// path relative to dir.
func generateCase(t testing.TB, dir string) (map[string][]byte, error) {
	t.Helper()
	files := map[string][]byte{}
	for _, run := range caseRuns(t, dir) {
		cfg, err := LoadConfig(filepath.Join(dir, run.config))
		if err != nil {
			return nil, err
		}
		cfg.Spec = filepath.Join(dir, run.spec)
		if err := cfg.Complete(); err != nil {
			return nil, err
		}
		in, err := Load(cfg, "")
		if err != nil {
			return nil, err
		}
		in.OapiCodegen = linkedOapiCodegen()
		res, err := Generate(cfg, in)
		if err != nil {
			return nil, err
		}
		for _, f := range res.Files {
			rel, err := filepath.Rel(dir, filepath.Join(cfg.Dir(), f.Path))
			if err != nil {
				return nil, err
			}
			files[rel] = f.Data
		}
	}
	return files, nil
}

// TestGolden regenerates every case in memory and compares it byte for byte
// with the files in the case folder. go test ./gen -run TestGolden -update
// (make golden) rewrites them.
func TestGolden(t *testing.T) {
	for _, name := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(goldenDir, name)
			files, err := generateCase(t, dir)
			stderrFile := filepath.Join(dir, "stderr.txt")
			if err != nil {
				abs, _ := filepath.Abs(dir)
				got := strings.ReplaceAll(err.Error(), abs+string(filepath.Separator), "")
				got = strings.ReplaceAll(got, dir+string(filepath.Separator), "") + "\n"
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
			}
			var gotNames []string
			for name, data := range files {
				gotNames = append(gotNames, name)
				path := filepath.Join(out, name)
				if *update {
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, data, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Errorf("%s: generated but not in the golden case: %v", name, err)
					continue
				}
				if diff := cmp.Diff(string(want), string(data)); diff != "" {
					t.Errorf("%s differs (-want +got):\n%s", name, diff)
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
	dir := filepath.Join(goldenDir, "all_fields")
	a, err := generateCase(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		b, err := generateCase(t, dir)
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
