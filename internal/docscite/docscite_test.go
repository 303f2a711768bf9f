package docscite

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckFindsWhatIsMissing: a doc that cites a test no file declares,
// a make target the Makefile lacks, or an internal document is reported,
// with its line; what exists is not.
func TestCheckFindsWhatIsMissing(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("Makefile", "test:\n\tgo test ./...\nbench-wait:\n\ttrue\n")
	write("a/a_test.go", "package a\n\nfunc TestThere(t *testing.T) {}\nfunc FuzzThere(f *testing.F) {}\n")
	write("docs/x.md", "`TestThere` and `FuzzThere`, by `make test` and `make bench-wait`.\n"+
		"`TestGone` proves it.\nRun `make soak`.\nAs the design brief says.\n"+
		"```go\nfunc TestMine(t *testing.T) {}\n```\nand `TestMine` is the reader's own.\n")
	docs, err := Docs(root)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := Check(root, docs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		"docs/x.md:2: cites TestGone, which no _test.go file declares",
		"docs/x.md:3: cites `make soak`, which the Makefile does not define",
		"docs/x.md:4: names design brief, a document users do not have",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestTheDocsCiteWhatExists: the repository's own docs pass the check.
func TestTheDocsCiteWhatExists(t *testing.T) {
	root := filepath.Join("..", "..")
	docs, err := Docs(root)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := Check(root, docs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
