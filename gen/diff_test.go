package gen

import (
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestUnified(t *testing.T) {
	a := "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\n"
	b := "a\nb\nc\nD\ne\nf\ng\nh\ni\nj\nk\nl"
	want := `--- a/x
+++ b/x
@@ -1,7 +1,7 @@
 a
 b
 c
-d
+D
 e
 f
 g
@@ -9,3 +9,4 @@
 i
 j
 k
+l
\ No newline at end of file
`
	if diff := cmp.Diff(want, unified("a/x", "b/x", a, b)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := unified("/dev/null", "b/x", "", "one\n"); got != "--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+one\n" {
		t.Errorf("new file: %q", got)
	}
}

// TestEditScript: the script keeps or removes every line of x and keeps or
// adds every line of y, in order, for random pairs of texts.
func TestEditScript(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	text := func() []string {
		var l []string
		for i := r.Intn(30); i > 0; i-- {
			l = append(l, string(rune('a'+r.Intn(4)))+"\n")
		}
		return l
	}
	for i := 0; i < 500; i++ {
		x, y := text(), text()
		var gotX, gotY []string
		for _, op := range editScript(x, y) {
			if op.kind != '+' {
				gotX = append(gotX, op.line)
			}
			if op.kind != '-' {
				gotY = append(gotY, op.line)
			}
		}
		if strings.Join(gotX, "") != strings.Join(x, "") || strings.Join(gotY, "") != strings.Join(y, "") {
			t.Fatalf("script of %q -> %q rebuilds %q -> %q", x, y, gotX, gotY)
		}
	}
}

// TestDiffReportsStaleFiles: generated files that differ or are missing are
// reported, scaffolds only when missing; equal files are not.
func TestDiffReportsStaleFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("same.gen.go", "x\n")
	write("stale.gen.go", "old\n")
	write("mine_phases.go", "edited by the user\n")
	res := &Result{Files: []OutputFile{
		{Path: "same.gen.go", Data: []byte("x\n")},
		{Path: "stale.gen.go", Data: []byte("new\n")},
		{Path: "missing.gen.go", Data: []byte("m\n")},
		{Path: "mine_phases.go", Data: []byte("scaffold\n"), Owned: true},
		{Path: "new_phases.go", Data: []byte("scaffold\n"), Owned: true},
	}}
	diffs, err := Diff(res, dir)
	if err != nil {
		t.Fatal(err)
	}
	var heads []string
	for _, d := range diffs {
		heads = append(heads, strings.SplitN(d, "\n", 2)[0])
	}
	want := []string{"--- a/" + filepath.ToSlash(filepath.Join(dir, "stale.gen.go")), "--- /dev/null", "--- /dev/null"}
	if diff := cmp.Diff(want, heads); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
