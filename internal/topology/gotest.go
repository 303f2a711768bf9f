package topology

import (
	"bufio"
	"fmt"
	"strings"
)

// PackageResult is one package's line in `go test` output, with the tests
// that failed in it.
type PackageResult struct {
	Package string
	OK      bool
	Elapsed string   // as go test printed it, e.g. 53.860s
	Failed  []string // top-level tests that failed
}

// ParseGoTest reads `go test` output (without -v) and returns one result
// per package, in order, and how many tests failed in all.
func ParseGoTest(out string) ([]PackageResult, int) {
	var res []PackageResult
	var failed []string
	total := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "--- FAIL: "); ok {
			failed = append(failed, strings.Fields(name)[0])
			total++
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "ok":
			res = append(res, PackageResult{Package: f[1], OK: true, Elapsed: f[2]})
			failed = nil
		case len(f) >= 2 && f[0] == "FAIL" && f[1] != "":
			r := PackageResult{Package: f[1], Failed: failed}
			if len(f) >= 3 {
				r.Elapsed = f[2]
			}
			res = append(res, r)
			failed = nil
		}
	}
	return res, total
}

// Summary is one line per package: ok, or FAIL with the failed tests.
func Summary(res []PackageResult) string {
	var b strings.Builder
	for _, r := range res {
		if r.OK {
			fmt.Fprintf(&b, "  ok    %s (%s)\n", r.Package, r.Elapsed)
			continue
		}
		fmt.Fprintf(&b, "  FAIL  %s: %s\n", r.Package, strings.Join(r.Failed, ", "))
	}
	return b.String()
}
