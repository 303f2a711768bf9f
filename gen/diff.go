package gen

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Diff compares res with the files under dir, as Write would write them:
// generated files byte for byte, scaffolds only for being there (they are
// the user's). It returns one unified diff per file that differs (from the
// file on disk to what the spec produces), in res's order, and touches
// nothing. `idemgen generate -check` prints them, as `sqlc diff` does.
func Diff(res *Result, dir string) ([]string, error) {
	var diffs []string
	for _, f := range res.Files {
		path := f.in(dir)
		old, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			old = nil
		case err != nil:
			return nil, err
		case f.Owned:
			continue
		}
		if err == nil && bytes.Equal(old, f.Data) {
			continue
		}
		from := "a/" + filepath.ToSlash(path)
		if err != nil {
			from = "/dev/null"
		}
		diffs = append(diffs, unified(from, "b/"+filepath.ToSlash(path), string(old), string(f.Data)))
	}
	return diffs, nil
}

// unified returns the unified diff (three lines of context) that turns a
// into b.
func unified(nameA, nameB, a, b string) string {
	x, y := splitLines(a), splitLines(b)
	ops := editScript(x, y)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", nameA, nameB)
	const context = 3
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		// A hunk: from context lines before the first change to context
		// lines after the last change that is within 2*context of the next.
		start := max(i-context, 0)
		end := i
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				end = j
			} else if j-end > 2*context {
				break
			}
		}
		stop := min(end+context+1, len(ops))
		hunk := ops[start:stop]
		aStart, bStart := hunk[0].a, hunk[0].b
		var aLen, bLen int
		for _, op := range hunk {
			if op.kind != '+' {
				aLen++
			}
			if op.kind != '-' {
				bLen++
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(aStart, aLen), hunkRange(bStart, bLen))
		for _, op := range hunk {
			out.WriteByte(op.kind)
			out.WriteString(op.line)
			if !strings.HasSuffix(op.line, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = stop
	}
	return out.String()
}

func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// splitLines splits s after each newline; the last line may lack one.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// edit is one line of an edit script: kept (' '), removed ('-') or added
// ('+'); a and b are its line indexes (the lines before it) in each text.
type edit struct {
	kind byte
	line string
	a, b int
}

// editScript returns a shortest edit script from x to y. The common prefix
// and suffix are kept as they are; the lines between are matched by longest
// common subsequence, or, when that table would be too large (a file
// rewritten from end to end), all replaced.
func editScript(x, y []string) []edit {
	p := 0
	for p < len(x) && p < len(y) && x[p] == y[p] {
		p++
	}
	s := 0
	for s < len(x)-p && s < len(y)-p && x[len(x)-1-s] == y[len(y)-1-s] {
		s++
	}
	var ops []edit
	for i := 0; i < p; i++ {
		ops = append(ops, edit{' ', x[i], i, i})
	}
	mx, my := x[p:len(x)-s], y[p:len(y)-s]
	if n, m := len(mx), len(my); n*m <= 1<<22 {
		// lcs[i][j] is the LCS length of mx[i:] and my[j:].
		lcs := make([][]int32, n+1)
		for i := range lcs {
			lcs[i] = make([]int32, m+1)
		}
		for i := n - 1; i >= 0; i-- {
			for j := m - 1; j >= 0; j-- {
				if mx[i] == my[j] {
					lcs[i][j] = lcs[i+1][j+1] + 1
				} else {
					lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
				}
			}
		}
		i, j := 0, 0
		for i < n || j < m {
			switch {
			case i < n && j < m && mx[i] == my[j]:
				ops = append(ops, edit{' ', mx[i], p + i, p + j})
				i, j = i+1, j+1
			case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
				ops = append(ops, edit{'-', mx[i], p + i, p + j})
				i++
			default:
				ops = append(ops, edit{'+', my[j], p + i, p + j})
				j++
			}
		}
	} else {
		for i, l := range mx {
			ops = append(ops, edit{'-', l, p + i, p})
		}
		for j, l := range my {
			ops = append(ops, edit{'+', l, p + len(mx), p + j})
		}
	}
	for k := 0; k < s; k++ {
		ops = append(ops, edit{' ', x[len(x)-s+k], len(x) - s + k, len(y) - s + k})
	}
	return ops
}
