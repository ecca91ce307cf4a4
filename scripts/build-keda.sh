#!/usr/bin/env bash
# Build KEDA for the e2e autoscaling scenario (e2e/node/test_9e_keda.py) into build/e2e/bin, once:
# keda (its operator, cmd/operator) and keda-adapter (its external metrics API server,
# cmd/adapter), from the Go module pinned by e2e/go/keda/go.mod and go.sum. Later calls
# reuse a binary while the KEDA module version built into it (go version -m) is the pin.
# KEDA's CRDs are not built: the scenario applies config/crd/bases/ from the module cache
# (`go mod download -json github.com/kedacore/keda/v2` in e2e/go/keda names the directory).
# Needs only `go` (>= 1.26) and the Go module proxy.
#
#   scripts/build-keda.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD_DIR="$ROOT/e2e/go/keda"
BIN_DIR="$ROOT/build/e2e/bin"
MODULE="github.com/kedacore/keda/v2"
# The pin, read from go.mod's require line so it is written in one place.
WANT=$(sed -n "s#^[[:space:]]*$MODULE \(v[^[:space:]]*\).*#\1#p" "$MOD_DIR/go.mod" | head -1)
[[ -n "$WANT" ]] || { echo "keda: no $MODULE require line in $MOD_DIR/go.mod" >&2; exit 1; }
mkdir -p "$BIN_DIR"

built_version() {  # the KEDA module version a binary was built from, or nothing
    [[ -x "$1" ]] || return 0
    go version -m "$1" 2>/dev/null | awk -v m="$MODULE" '($1 == "mod" || $1 == "dep") && $2 == m { print $3 }'
}

for pair in keda:cmd/operator keda-adapter:cmd/adapter; do
    name="${pair%%:*}"; pkg="$MODULE/${pair#*:}"; bin="$BIN_DIR/$name"
    if [[ "$(built_version "$bin")" == "$WANT" ]]; then
        echo "keda build: $name $WANT ... reusing $bin"
        continue
    fi
    command -v go >/dev/null 2>&1 || { echo "keda build: need 'go' (>= 1.26) on PATH to build $name" >&2; exit 1; }
    echo "keda build: $name $WANT ... building $pkg (first time only; several minutes)"
    start=$(date +%s)
    # As KEDA's Makefile builds them (CGO_ENABLED=0, version.Version set); -mod=readonly:
    # go.sum is the pin and a build never rewrites it.
    (cd "$MOD_DIR" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false -mod=readonly" \
        go build -trimpath -ldflags "-s -w -X=$MODULE/version.Version=$WANT" -o "$bin.tmp" "$pkg") || {
        echo "keda build: $name FAILED (go build in $MOD_DIR)" >&2
        rm -f "$bin.tmp"
        exit 1
    }
    mv -f "$bin.tmp" "$bin"
    secs=$(( $(date +%s) - start ))
    echo "$secs" > "$bin.build-seconds"
    echo "keda build: $name built in ${secs}s"
done
