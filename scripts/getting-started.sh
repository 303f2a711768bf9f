#!/usr/bin/env bash
# Runs every sh block of docs/getting-started.md, in order, in a temp
# directory, against this checkout. Usage: scripts/getting-started.sh [-q]
# With -q it prints one line, and the full trace only if a command fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
script="$work/steps.sh"
awk '/^```sh$/ {on=1; next} /^```$/ {on=0} on' "$root/docs/getting-started.md" > "$script"
cd "$work"
if [ "${1:-}" = "-q" ]; then
  if ! IDEMGEN="$root" bash -euxo pipefail "$script" > "$work/trace.log" 2>&1; then
    cat "$work/trace.log"
    echo "getting-started: a command failed (trace above)"
    exit 1
  fi
else
  IDEMGEN="$root" bash -euxo pipefail "$script"
fi
echo "getting-started: every command of docs/getting-started.md ran"
