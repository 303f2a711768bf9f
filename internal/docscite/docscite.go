// Package docscite checks that the docs cite only what exists: every test,
// benchmark and fuzz target they name (TestX, BenchmarkX, FuzzX) is a
// function of a _test.go file of the repository, every `make` target they
// name is a target of its Makefile, and they name no document a user does
// not have (the project's internal design notes). make lint runs it
// (cmd: go run ./internal/docscite).
package docscite

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// A Problem is one citation of something that does not exist.
type Problem struct {
	File string
	Line int
	What string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.What) }

var (
	testName   = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*`)
	testFunc   = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*)\(`)
	makeTarget = regexp.MustCompile("`make ([a-z][a-z0-9-]*)")
	target     = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
)

// internalDocs are names of documents only the project's authors have.
var internalDocs = []string{"design brief", "DESIGN.md", "STYLE.md", "../shared/"}

// Check reads the repository at root and returns the problems of the
// Markdown files docs lists (paths relative to root).
func Check(root string, docs []string) ([]Problem, error) {
	tests, err := testFuncs(root)
	if err != nil {
		return nil, err
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return nil, err
	}
	targets := map[string]bool{}
	for _, m := range target.FindAllSubmatch(mk, -1) {
		targets[string(m[1])] = true
	}
	var problems []Problem
	for _, doc := range docs {
		data, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			return nil, err
		}
		// A test the doc itself declares (an example for the reader's own
		// service) exists.
		own := map[string]bool{}
		for _, m := range testFunc.FindAllSubmatch(bytes.ReplaceAll(data, []byte("\n\t"), []byte("\n")), -1) {
			own[string(m[1])] = true
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			for _, name := range testName.FindAllString(line, -1) {
				if !tests[name] && !own[name] {
					problems = append(problems, Problem{doc, n, "cites " + name + ", which no _test.go file declares"})
				}
			}
			for _, m := range makeTarget.FindAllStringSubmatch(line, -1) {
				if !targets[m[1]] {
					problems = append(problems, Problem{doc, n, "cites `make " + m[1] + "`, which the Makefile does not define"})
				}
			}
			for _, d := range internalDocs {
				if strings.Contains(line, d) {
					problems = append(problems, Problem{doc, n, "names " + d + ", a document users do not have"})
				}
			}
		}
	}
	return problems, nil
}

// testFuncs returns the test, benchmark and fuzz functions declared in the
// _test.go files under root.
func testFuncs(root string) (map[string]bool, error) {
	names := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllSubmatch(data, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	return names, err
}

// Docs returns the Markdown files a user reads: docs/*.md, README.md and
// the examples' READMEs, relative to root, sorted.
func Docs(root string) ([]string, error) {
	var out []string
	for _, pattern := range []string{"README.md", "docs/*.md", "examples/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return nil, err
		}
		for _, p := range m {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return nil, err
			}
			out = append(out, rel)
		}
	}
	sort.Strings(out)
	return out, nil
}
