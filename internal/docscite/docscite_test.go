package docscite

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The fixtures' pages, each path spelled in two pieces so that this file,
// which the repository's own check reads too, names no page it lacks.
const (
	pageX    = "docs/" + "x.md"
	pageY    = "docs/" + "y.md"
	pageGone = "docs/" + "gone.md"
)

// TestCheckFindsWhatIsMissing: a doc that cites a test no file declares,
// a make target the Makefile lacks, or an internal document is reported,
// with its line, and so is a link to a page or a heading that does not
// exist, and a Go or Markdown file that names a page or a page's section
// that does not exist; what exists is not.
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
	write(pageX, "`TestThere` and `FuzzThere`, by `make test` and `make bench-wait`.\n"+
		"`TestGone` proves it.\nRun `make soak`.\nAs the design brief says.\n"+
		"```go\nfunc TestMine(t *testing.T) {}\n```\nand `TestMine` is the reader's own.\n"+
		"[y](y.md), [its record](y.md#the-record), [its second](y.md#the-record-1),\n"+
		"[a wait](y.md#asyncclaimcommit-under-failover), [here](#links), [code](../a/a_test.go),\n"+
		"[the web](https://example.com/gone.md), [readme](../README.md).\n"+
		"## Links\n"+
		"[gone](gone.md), [no heading](y.md#nope), [fenced](y.md#not-a-heading).\n"+
		"```\n[in a block](gone.md)\n```\n")
	write(pageY, "# Y\n\n## The record\n\n### The record\n\n## `AsyncClaimCommit` under failover\n\n## Duplicates wait.\n"+
		"```sh\n# not a heading\n```\n"+
		"As "+pageX+", \"Links\", says; "+pageGone+" does not.\n")
	write("README.md", "["+pageY+"]("+pageY+"#duplicates-wait), [gone]("+pageGone+").\n")
	write("a/a.go", "package a\n\n"+
		"// The record ("+pageY+", \"The record\") and "+pageY+", \"AsyncClaimCommit under\n"+
		"// failover\"; "+pageY+" (\"Duplicates wait\"), "+pageY+"'s \"Y\".\n"+
		"// Not "+pageY+", \"Gone section\", nor "+pageGone+".\n"+
		"var doc = \"../"+pageY+"\"\n")
	write("a/testdata/b.go", "package b // "+pageGone+"\n")
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
		"README.md:1: links to " + pageGone + ", which does not exist",
		"README.md:1: names " + pageGone + ", which does not exist",
		"a/a.go:5: names " + pageY + ", \"Gone section\", which is not a heading of it",
		"a/a.go:5: names " + pageGone + ", which does not exist",
		pageX + ":2: cites TestGone, which no _test.go file declares",
		pageX + ":3: cites `make soak`, which the Makefile does not define",
		pageX + ":4: names design brief, a document users do not have",
		pageX + ":13: links to gone.md, which does not exist",
		pageX + ":13: links to y.md#nope, which is not a heading of " + pageY,
		pageX + ":13: links to y.md#not-a-heading, which is not a heading of " + pageY,
		pageY + ":13: names " + pageGone + ", which does not exist",
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
