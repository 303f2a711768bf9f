# Summarises `go test -bench` output: the median ns/op of each benchmark
# and its ratio to the first benchmark of the same group (the baseline).
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	for (i = 1; i <= NF; i++) if ($(i+1) == "ns/op") { v[name, ++n[name]] = $i }
	if (!(name in seen)) { seen[name] = 1; order[++count] = name }
}
END {
	for (k = 1; k <= count; k++) {
		name = order[k]; m = n[name]
		for (i = 1; i <= m; i++) a[i] = v[name, i]
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		med[name] = (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
		group = name; sub(/\/[^\/]*$/, "", group)
		if (!(group in base)) base[group] = med[name]
		printf "%-50s %12.0f ns/op  %5.2fx baseline  (median of %d)\n", name, med[name], med[name] / base[group], m
	}
}
