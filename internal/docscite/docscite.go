// Package docscite checks that the docs cite only what exists: every test,
// benchmark and fuzz target they name (TestX, BenchmarkX, FuzzX) is a
// function of a _test.go file of the repository, every `make` target they
// name is a target of its Makefile, and they name no document a user does
// not have (the project's internal design notes). Their links to the
// repository's files and headings exist too, and so does every page of
// docs/ that they or the Go files name, with the section named after it
// (docs/<page>.md, "Section"). make lint runs it
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
	"strconv"
	"strings"
	"unicode"
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
	link       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	scheme     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)(?:\s+#+)?\s*$`)
	// A page of docs/ named, and the section named right after it:
	// docs/<page>.md, "Section"; docs/<page>.md ("Section");
	// docs/<page>.md's "Section".
	// The section may go on on the next line, or the next line of a Go
	// comment (lineBreak).
	pageName  = regexp.MustCompile(`\b(docs/[A-Za-z0-9_-]+\.md)\b(?:(?:,|[\s/]+\(|'s)[\s/]*"([^"]{1,200})")?`)
	lineBreak = regexp.MustCompile(`\s*\n\s*(?://)?\s*`)
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
	ps := pages{root, map[string][]string{}}
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
		fenced := false
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
			}
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				if fenced || scheme.MatchString(m[1]) {
					continue
				}
				what, err := ps.checkLink(doc, m[1])
				if err != nil {
					return nil, err
				}
				if what != "" {
					problems = append(problems, Problem{doc, n, what})
				}
			}
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
	files, err := citingFiles(root)
	if err != nil {
		return nil, err
	}
	for _, file := range files {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			return nil, err
		}
		for _, m := range pageName.FindAllSubmatchIndex(data, -1) {
			section := ""
			if m[4] >= 0 {
				section = lineBreak.ReplaceAllString(string(data[m[4]:m[5]]), " ")
			}
			what, err := ps.checkName(string(data[m[2]:m[3]]), section)
			if err != nil {
				return nil, err
			}
			if what != "" {
				problems = append(problems, Problem{file, 1 + bytes.Count(data[:m[0]], []byte("\n")), what})
			}
		}
	}
	sort.SliceStable(problems, func(i, j int) bool {
		if problems[i].File != problems[j].File {
			return problems[i].File < problems[j].File
		}
		return problems[i].Line < problems[j].Line
	})
	return problems, nil
}

// pages reads the headings of the repository's Markdown files, each once.
type pages struct {
	root     string
	headings map[string][]string // by path relative to root
}

// checkLink returns what is wrong with doc's link to target (a path
// relative to doc, perhaps with an #anchor), or "".
func (ps pages) checkLink(doc, target string) (string, error) {
	path, anchor, _ := strings.Cut(target, "#")
	if path == "" {
		path = filepath.Base(doc)
	}
	path = filepath.ToSlash(filepath.Join(filepath.Dir(doc), path))
	if _, err := os.Stat(filepath.Join(ps.root, path)); err != nil {
		return "links to " + target + ", which does not exist", nil
	}
	if anchor == "" || !strings.HasSuffix(path, ".md") {
		return "", nil
	}
	headings, err := ps.read(path)
	if err != nil {
		return "", err
	}
	if !anchors(headings)[anchor] {
		return "links to " + target + ", which is not a heading of " + path, nil
	}
	return "", nil
}

// checkName returns what is wrong with a mention of the page at path
// (relative to the root), and of its section if not "", or "". A section
// is a heading's text, backticks removed, or that without its trailing
// punctuation.
func (ps pages) checkName(path, section string) (string, error) {
	if _, err := os.Stat(filepath.Join(ps.root, path)); err != nil {
		return "names " + path + ", which does not exist", nil
	}
	if section == "" {
		return "", nil
	}
	headings, err := ps.read(path)
	if err != nil {
		return "", err
	}
	trim := func(s string) string { return strings.TrimRightFunc(s, unicode.IsPunct) }
	for _, h := range headings {
		if h == section || trim(h) == trim(section) {
			return "", nil
		}
	}
	return "names " + path + ", " + strconv.Quote(section) + ", which is not a heading of it", nil
}

// read returns the text of the headings of the Markdown file at path, in
// order, backticks removed, those in code blocks left out.
func (ps pages) read(path string) ([]string, error) {
	if h, ok := ps.headings[path]; ok {
		return h, nil
	}
	data, err := os.ReadFile(filepath.Join(ps.root, path))
	if err != nil {
		return nil, err
	}
	var h []string
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if m := heading.FindStringSubmatch(line); m != nil && !fenced {
			h = append(h, strings.ReplaceAll(m[1], "`", ""))
		}
	}
	ps.headings[path] = h
	return h, nil
}

// anchors returns the anchors GitHub gives headings: lowercased, their
// punctuation but hyphens and underscores dropped, spaces made hyphens, a
// repeated one suffixed -1, -2, ...
func anchors(headings []string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, h := range headings {
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a += "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
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

// citingFiles returns the files that may name pages of docs/: the .go and
// .md files under root but those of vendor and testdata directories,
// relative to root.
func citingFiles(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "bin", "vendor", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".md") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		out = append(out, filepath.ToSlash(rel))
		return err
	})
	return out, err
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
