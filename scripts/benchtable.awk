# Summarises `go test -bench BenchmarkEngine` output (several rounds, as
# make bench runs them, or -count runs): per benchmark, the median of every
# reported metric, and the median over rounds of its requests/s over
# plain's and plain-tx's of the same round at the same concurrency (the
# net/http rows, std-*, over std-plain's and std-plain-tx's). A round's k-th
# run of a benchmark is paired with the k-th run of its base; testing names
# a repeated sub-benchmark name#01, name#02, ..., which is stripped.
/^BenchmarkEngine\// {
	name = $1; sub(/^BenchmarkEngine\//, "", name); sub(/-[0-9]+$/, "", name); sub(/#[0-9]+$/, "", name)
	if (!(name in seen)) { seen[name] = 1; order[++count] = name }
	runs[name]++
	for (i = 3; i < NF; i += 2) { unit = $(i+1); v[name, unit, runs[name]] = $i; units[unit] = 1 }
}
# ratio is the median over rounds of name's requests/s over base's, as
# text: "-" when base did not run (a -bench filter left it out).
function ratio(name, base,    m, i, a) {
	if (!(base in seen)) return "-"
	m = (runs[name] < runs[base]) ? runs[name] : runs[base]
	for (i = 1; i <= m; i++) a[i] = v[name, "req/s", i] / v[base, "req/s", i]
	return sprintf("%.2fx", mid(a, m))
}
function median(name, unit,    m, i, a) {
	m = runs[name]
	for (i = 1; i <= m; i++) a[i] = v[name, unit, i] + 0
	return mid(a, m)
}
# mid sorts a[1..m] and returns its median.
function mid(a, m,    i, j, t) {
	for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
}
END {
	printf "| benchmark | req/s | vs plain | vs plain-tx | p50 µs | p99 µs | round trips | commits | allocs/op |\n"
	printf "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
	for (k = 1; k <= count; k++) {
		name = order[k]; c = name; sub(/\/.*/, "", c)
		# The net/http rows (std-*) against their own plain handlers.
		base = (name ~ /\/std-/) ? "/std-" : "/"
		rps = median(name, "req/s")
		printf "| %s | %.0f | %s | %s | %.0f | %.0f | %.2f | %.2f | %.0f |\n", name, rps,
			ratio(name, c base "plain"), ratio(name, c base "plain-tx"),
			median(name, "p50-µs"), median(name, "p99-µs"), median(name, "trips/op"), median(name, "commits/op"),
			median(name, "allocs/op")
	}
	printf "\n(median of %d runs each; ratios: median of the rounds' own)\n", runs[order[1]]
}
