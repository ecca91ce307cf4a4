#!/usr/bin/env bash
# Build a Go tool pinned by tools/<name>/go.mod (a `tool` directive, versions fixed by its go.sum)
# into build/bin/<name>, once. Later calls reuse the binary while it is newer than go.mod/go.sum.
# Needs only `go` and the Go module proxy.
#
#   scripts/build-go-tool.sh promtool       (tools/promtool: github.com/prometheus/prometheus)
#   scripts/build-go-tool.sh kubeconform    (tools/kubeconform: github.com/yannh/kubeconform)
#   scripts/build-go-tool.sh prometheus     (tools/prometheus: the server, for the e2e; no UI assets)
set -euo pipefail

NAME="${1:?usage: scripts/build-go-tool.sh NAME (a directory under tools/)}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD_DIR="$ROOT/tools/$NAME"
BIN="$ROOT/build/bin/$NAME"

[[ -f "$MOD_DIR/go.mod" ]] || { echo "$NAME: no $MOD_DIR/go.mod" >&2; exit 1; }
if [[ -x "$BIN" && "$BIN" -nt "$MOD_DIR/go.mod" && "$BIN" -nt "$MOD_DIR/go.sum" ]]; then
    echo "$NAME: reusing $BIN"
    exit 0
fi
command -v go >/dev/null 2>&1 || { echo "$NAME: need 'go' on PATH to build $NAME" >&2; exit 1; }

# The one `tool` line of the module names the package to build.
pkg=$(sed -n 's/^tool[[:space:]]\+\([^[:space:]]\+\)$/\1/p' "$MOD_DIR/go.mod" | head -1)
[[ -n "$pkg" ]] || { echo "$NAME: $MOD_DIR/go.mod has no 'tool' line" >&2; exit 1; }
mkdir -p "$(dirname "$BIN")"
start=$(date +%s)
echo "$NAME: building $pkg (tools/$NAME/go.mod) into $BIN (first time only)"
# -mod=readonly: go.sum is the pin; a build never rewrites it.
(cd "$MOD_DIR" && GOFLAGS="${GOFLAGS:-} -buildvcs=false -mod=readonly" go build -ldflags "-s -w" -o "$BIN" "$pkg")
echo "$NAME: built in $(( $(date +%s) - start ))s"
