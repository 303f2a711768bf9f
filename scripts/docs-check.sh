#!/usr/bin/env bash
# Runs every sh block of a guide in docs/, in order, in a temp directory,
# against this checkout. Usage: scripts/docs-check.sh [-q] docs/GUIDE.md
# With -q it prints one line, and the full trace only if a command fails.
set -euo pipefail
quiet=
if [ "${1:-}" = "-q" ]; then quiet=1; shift; fi
root=$(cd "$(dirname "$0")/.." && pwd)
doc=${1:?usage: scripts/docs-check.sh [-q] docs/GUIDE.md}
case $doc in /*) ;; *) doc=$PWD/$doc ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Reachable by others: run as root, a guide's local PostgreSQL runs as the
# postgres user, and keeps its data under the guide's directory (removed
# with it) only when that user can reach it.
chmod 755 "$work"
script="$work/steps.sh"
# A guide's background jobs (a service it started) end with it, also when
# one of its commands fails.
echo 'trap '"'"'kill $(jobs -p) 2>/dev/null || true'"'"' EXIT' > "$script"
awk '/^```sh$/ {on=1; next} /^```$/ {on=0} on' "$doc" >> "$script"
cd "$work"
if [ -n "$quiet" ]; then
  if ! IDEMGEN="$root" bash -euxo pipefail "$script" > "$work/trace.log" 2>&1; then
    cat "$work/trace.log"
    echo "docs-check: a command of $(basename "$doc") failed (trace above)"
    exit 1
  fi
else
  IDEMGEN="$root" bash -euxo pipefail "$script"
fi
echo "docs-check: every command of $(basename "$doc") ran"
