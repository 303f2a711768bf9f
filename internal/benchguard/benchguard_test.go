package main

import (
	"strings"
	"testing"
)

const table = `| benchmark | req/s | vs plain | vs plain-tx | p50 µs | p99 µs | round trips | commits | allocs/op |
|---|---:|---:|---:|---:|---:|---:|---:|---:|
| c16/plain | 9000 | 1.00x | 1.40x | 1 | 2 | 1.00 | 1.00 | 40 |
| c16/single-phase | 4000 | 0.44x | 0.61x | 1 | 2 | 3.00 | 1.00 | 164 |
| c16/replay | 120000 | 13.5x | 18.0x | 1 | 2 | 0.00 | 0.00 | 31 |
`

// TestGuardMarksWhatIsOff: a ratio under its floor and allocations over
// their ceiling are marked, what holds is ok, and a bound the table did not
// measure says so; a malformed guard line is an error that says the form.
func TestGuardMarksWhatIsOff(t *testing.T) {
	guard := `# floors and ceilings
c16/single-phase vs-plain-tx >= 0.55   # 0.61 when set
c16/replay vs-plain >= 15
c16/single-phase allocs <= 150
c16/replay allocs <= 40
c1/single-phase vs-plain-tx >= 0.5
`
	var out strings.Builder
	if err := run(guard, strings.NewReader(table), &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| c16/single-phase vs-plain-tx | 0.61 | >= 0.55 | ok |",
		"| c16/replay vs-plain | 13.5 | >= 15 | **below its floor** |",
		"| c16/single-phase allocs | 164 | <= 150 | **above its ceiling** |",
		"| c16/replay allocs | 31 | <= 40 | ok |",
		"| c1/single-phase vs-plain-tx | not measured | >= 0.5 | |",
		"2 of 5 guards off",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
	if err := run("c16/replay speed >= 1\n", strings.NewReader(table), &out); err == nil || !strings.Contains(err.Error(), "want BENCHMARK vs-plain|vs-plain-tx|allocs") {
		t.Errorf("a malformed guard: %v", err)
	}
}
