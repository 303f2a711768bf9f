#!/bin/sh
# ab.sh compares the engine at two commits: BenchmarkEngine's cases, each
# over a fixed number of requests, old and new binaries in ABBA order
# (old, new, new, old) so that a drift of the machine weighs on both alike.
#
#   DATABASE_URL=postgres://... scripts/ab.sh OLD NEW [QUADS]
#
# OLD and NEW are commits; QUADS (3) is how many ABBA quads per case.
# OLD_PATCH names a patch applied to OLD before it is built (git apply),
# to compare NEW with OLD as changed by it: scripts/ab-restore-3d063bc.patch
# gives the path below pgx's API (3d063bc) the lock_timeout restore that
# the engine now makes, so that the two differ in their path alone.
# DATABASE_URL names a warm PostgreSQL, durable as make bench's is (fsync
# and synchronous_commit on): both binaries use it. CASES overrides the
# cases, "clients/name/requests" separated by spaces. For each case it
# prints the new/old ratio of the summed requests/s of the timed loops, and
# of the summed CPU seconds of the two processes (setup included), with the
# quads' own throughput ratios.
set -eu
[ $# -ge 2 ] || { echo "usage: DATABASE_URL=... $0 OLD NEW [QUADS]" >&2; exit 2; }
[ -n "${DATABASE_URL:-}" ] || { echo "ab.sh: set DATABASE_URL to a warm durable PostgreSQL (fsync on)" >&2; exit 2; }
old=$1 new=$2 quads=${3:-3}
CASES=${CASES:-"c16/single-phase/20000 c16/replay-cold/40000 c16/three-phase/8000 c1/single-phase/5000 c1/replay-cold/20000 c1/three-phase/2000"}
root=$(git rev-parse --show-toplevel)
dir=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$dir/src" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
for side in old new; do
	eval "rev=\$$side"
	git -C "$root" worktree add --detach --force "$dir/src" "$rev" >/dev/null 2>&1
	if [ "$side" = old ] && [ -n "${OLD_PATCH:-}" ]; then
		git -C "$dir/src" apply "$(cd "$(dirname "$OLD_PATCH")" && pwd)/$(basename "$OLD_PATCH")"
	fi
	(cd "$dir/src" && go test -c -o "$dir/$side.test" ./runtime/idemecho)
	git -C "$root" worktree remove --force "$dir/src"
done
export IDEMGEN_PG_DURABLE=1
for c in $CASES; do
	clients=${c%%/*} rest=${c#*/}
	name=${rest%/*} n=${rest##*/}
	for q in $(seq "$quads"); do
		for side in old new new old; do
			/usr/bin/time -f "cpu %U %S" -o "$dir/time" "$dir/$side.test" -test.run '^$' \
				-test.bench "BenchmarkEngine/^$clients\$/^$name\$" -test.benchtime "${n}x" >"$dir/out" 2>&1 ||
				{ cat "$dir/out" >&2; exit 1; }
			rps=$(awk '/^BenchmarkEngine/ { for (i = 3; i < NF; i++) if ($(i+1) == "req/s") print $i }' "$dir/out")
			[ -n "$rps" ] || { cat "$dir/out" >&2; exit 1; }
			echo "$q $side $rps $(awk '{ print $2 + $3 }' "$dir/time")"
		done
	done | awk -v c="$clients/$name" -v n="$n" '
		{ r[$2] += $3; cpu[$2] += $4; q[$1, $2] += $3; m = $1 }
		END {
			for (i = 1; i <= m; i++) quads = quads sprintf(" %.2f", q[i, "new"] / q[i, "old"])
			printf "%-18s %6d requests  new/old req/s %.3f  CPU %.3f  quads:%s\n", c, n, r["new"] / r["old"], cpu["new"] / cpu["old"], quads
		}'
done
