#!/usr/bin/env bash
# compat.sh: idemgen against the newest versions of the dependencies whose
# lowest working versions its go.mod requires (make test runs the toolkit
# on those floors, and the examples on theirs, with oapi-codegen/runtime
# v1.8, the line that still has strictmiddleware). Here a copy of the tree
# is moved to the newest: the toolkit's module with every package vetted
# and its short tests run, and the examples' module, whose generated
# servers and glue build and run on oapi-codegen/runtime v1.9, the line
# without strictmiddleware. Tests that compare generated files byte for
# byte with the golden ones are left out: those files name the version of
# oapi-codegen that made them.
#
# The newest are the versions below, checked into the script so that the
# run is the same every time; COMPAT_VERSIONS replaces them (for example
# COMPAT_VERSIONS="github.com/jackc/pgx/v5@latest ...").
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
versions=${COMPAT_VERSIONS:-"github.com/jackc/pgx/v5@v5.13.0 github.com/oapi-codegen/oapi-codegen/v2@v2.8.2 github.com/getkin/kin-openapi@v0.153.0 github.com/labstack/echo/v4@v4.16.6"}
runtime_line=${COMPAT_RUNTIME:-github.com/oapi-codegen/runtime@v1.9.0}
byte_for_byte='^(TestGolden|TestGenerateReadsNothing|TestFlagsSetWhatTheSectionSets)$'

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git ls-files -z | xargs -0 tar cf - | tar xf - -C "$tmp"

step() { echo "compat: $*"; }

cd "$tmp"
step "the toolkit with $versions"
$GO get $versions >/dev/null
$GO mod tidy >/dev/null
$GO vet ./...
$GO test -short -count=1 -skip "$byte_for_byte" ./...

cd examples
step "the examples with $runtime_line and $versions"
$GO get $runtime_line $versions >/dev/null
$GO mod tidy >/dev/null
$GO vet ./...
$GO test -short -count=1 ./...
step "ok"
