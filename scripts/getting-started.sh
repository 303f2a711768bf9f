#!/usr/bin/env bash
# Runs every sh block of docs/getting-started.md, in order, in a temp
# directory, against this checkout. Usage: scripts/getting-started.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
script="$work/steps.sh"
awk '/^```sh$/ {on=1; next} /^```$/ {on=0} on' "$root/docs/getting-started.md" > "$script"
cd "$work"
IDEMGEN="$root" bash -euxo pipefail "$script"
echo "getting-started: every command ran"
