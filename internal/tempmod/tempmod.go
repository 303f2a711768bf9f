// Package tempmod makes a throwaway Go module that uses this checkout of
// idemgen the way a user's module would: it requires idemgen (replaced by
// the checkout) and declares it as a go tool, so go generate can run
// `go tool idemgen`. Its go.sum is assembled from the checkout's modules, so
// building it downloads nothing new.
package tempmod

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// Root returns the directory of this idemgen checkout.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// New writes go.mod and go.sum of a module named name into dir.
func New(dir, name string) error {
	root := Root()
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return err
	}
	text := strings.Replace(string(mod), "module github.com/idemgen/idemgen", "module "+name, 1)
	text += "\nrequire github.com/idemgen/idemgen v0.0.0\n"
	if !strings.Contains(text, "github.com/oapi-codegen/runtime ") {
		text += "\nrequire github.com/oapi-codegen/runtime v1.9.0\n"
	}
	text += "\nreplace github.com/idemgen/idemgen => " + root + "\n"
	// The checkout's go.mod already declares the tool, for the example's
	// go:generate line; declare it once.
	if !strings.Contains(text, "\ntool github.com/idemgen/idemgen/cmd/idemgen\n") {
		text += "\ntool github.com/idemgen/idemgen/cmd/idemgen\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(text), 0o644); err != nil {
		return err
	}
	sums := map[string]bool{}
	for _, f := range []string{"go.sum", "golden/go.sum"} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(data), "\n") {
			if l != "" {
				sums[l] = true
			}
		}
	}
	lines := make([]string, 0, len(sums))
	for l := range sums {
		lines = append(lines, l)
	}
	sort.Strings(lines)
	return os.WriteFile(filepath.Join(dir, "go.sum"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// Go runs the go command in dir and returns its combined output.
func Go(dir string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}
