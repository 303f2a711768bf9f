// Command benchguard reads make bench's summary table (scripts/benchtable.awk's
// Markdown) on its standard input and prints each bound of a guard file
// (scripts/benchguard.txt) against what the table measured: a ratio below
// its floor or allocations above their ceiling is marked, so that a
// regression shows in the round that makes it. It only reports: its exit
// status is 0 whatever it finds (timing is never a test's verdict), and 2
// only when the guard file or the table cannot be read.
//
//	awk -f scripts/benchtable.awk bench.out | go run ./internal/benchguard scripts/benchguard.txt
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: benchguard GUARDFILE < TABLE")
		os.Exit(2)
	}
	guard, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchguard:", err)
		os.Exit(2)
	}
	if err := run(string(guard), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchguard:", err)
		os.Exit(2)
	}
}

// A bound is one line of the guard file: a benchmark's metric (a column of
// the table: vs-plain, vs-plain-tx, allocs) against a floor (>=) or a
// ceiling (<=).
type bound struct {
	bench, metric, op string
	value             float64
}

// columns are the table's columns a bound may name, by their header.
var columns = map[string]string{"vs-plain": "vs plain", "vs-plain-tx": "vs plain-tx", "allocs": "allocs/op"}

func parseGuard(text string) ([]bound, error) {
	var out []bound
	for i, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, "#") // a comment, whole line or trailing
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 || columns[f[1]] == "" || (f[2] != ">=" && f[2] != "<=") {
			return nil, fmt.Errorf("guard line %d %q: want BENCHMARK vs-plain|vs-plain-tx|allocs >=|<= NUMBER", i+1, line)
		}
		v, err := strconv.ParseFloat(f[3], 64)
		if err != nil {
			return nil, fmt.Errorf("guard line %d: %v", i+1, err)
		}
		out = append(out, bound{f[0], f[1], f[2], v})
	}
	return out, nil
}

// parseTable reads the table's rows: benchmark -> column header -> value
// (a ratio's trailing x dropped; "-" where the base did not run).
func parseTable(r io.Reader) (map[string]map[string]string, error) {
	rows := map[string]map[string]string{}
	var header []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if header == nil {
			header = cells
			continue
		}
		row := map[string]string{}
		for i, c := range cells {
			if i < len(header) {
				row[header[i]] = strings.TrimSuffix(c, "x")
			}
		}
		rows[cells[0]] = row
	}
	if header == nil {
		return nil, fmt.Errorf("no table on the input (make bench's summary, scripts/benchtable.awk)")
	}
	return rows, sc.Err()
}

func run(guard string, table io.Reader, w io.Writer) error {
	bounds, err := parseGuard(guard)
	if err != nil {
		return err
	}
	rows, err := parseTable(table)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "| guard | measured | bound | |")
	fmt.Fprintln(w, "|---|---:|---:|---|")
	off := 0
	for _, b := range bounds {
		name := b.bench + " " + b.metric
		cell, ok := rows[b.bench][columns[b.metric]]
		v, err := strconv.ParseFloat(cell, 64)
		if !ok || err != nil {
			fmt.Fprintf(w, "| %s | not measured | %s %g | |\n", name, b.op, b.value)
			continue
		}
		verdict := "ok"
		if (b.op == ">=" && v < b.value) || (b.op == "<=" && v > b.value) {
			verdict = map[string]string{">=": "**below its floor**", "<=": "**above its ceiling**"}[b.op]
			off++
		}
		fmt.Fprintf(w, "| %s | %g | %s %g | %s |\n", name, v, b.op, b.value, verdict)
	}
	if off > 0 {
		fmt.Fprintf(w, "\n%d of %d guards off: compare with the commit before (scripts/ab.sh) before it lands\n", off, len(bounds))
	} else {
		fmt.Fprintf(w, "\nevery guard holds (%d)\n", len(bounds))
	}
	return nil
}
