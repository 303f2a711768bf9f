# Summarises `go test -bench BenchmarkEngine` output (several -count runs):
# per benchmark, the median of every reported metric, and the ratio of its
# median requests/s to plain's and plain-tx's at the same concurrency (the
# net/http rows, std-*, to std-plain's and std-plain-tx's).
/^BenchmarkEngine\// {
	name = $1; sub(/^BenchmarkEngine\//, "", name); sub(/-[0-9]+$/, "", name)
	if (!(name in seen)) { seen[name] = 1; order[++count] = name }
	runs[name]++
	for (i = 3; i < NF; i += 2) { unit = $(i+1); v[name, unit, runs[name]] = $i; units[unit] = 1 }
}
function median(name, unit,    m, i, j, t, a) {
	m = runs[name]
	for (i = 1; i <= m; i++) a[i] = v[name, unit, i] + 0
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
		printf "| %s | %.0f | %.2fx | %.2fx | %.0f | %.0f | %.2f | %.2f | %.0f |\n", name, rps,
			rps / median(c base "plain", "req/s"), rps / median(c base "plain-tx", "req/s"),
			median(name, "p50-µs"), median(name, "p99-µs"), median(name, "trips/op"), median(name, "commits/op"),
			median(name, "allocs/op")
	}
	printf "\n(median of %d runs each)\n", runs[order[1]]
}
