#!/usr/bin/env bash
# Build the control plane for make e2e into build/e2e/bin, once: etcd, kube-apiserver,
# kube-controller-manager and kubectl, from their Go modules (e2e/go/etcd and
# e2e/go/kubernetes pin the versions, their go.sum files the content). Later calls reuse a
# binary as long as its --version reports the pin. Also ensures build/bin/helm
# (scripts/build-helm.sh). Needs only `go` and the Go module proxy.
#
#   e2e/build.sh
#
# Writes build/e2e/build-times.json: {binary: {"seconds": float, "cached": bool,
# "built_seconds": float | null (the build that made the binary), "version": str}}.
set -euo pipefail

KUBE_VERSION="v1.36.3"   # k8s.io/kubernetes; staging modules k8s.io/* v0.36.3 (e2e/go/kubernetes/go.mod)
ETCD_VERSION="3.6.16"    # go.etcd.io/etcd/*/v3 v3.6.16 (e2e/go/etcd/go.mod)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/build/e2e"
BIN_DIR="$OUT/bin"
TIMES="$OUT/build-times.json"

mkdir -p "$BIN_DIR"

"$ROOT/scripts/build-helm.sh"

kube_minor="${KUBE_VERSION#v1.}"; kube_minor="${kube_minor%%.*}"
kube_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kube_ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor"
    kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

# The version string each binary must report to be reused.
version_of() {
    local bin="$BIN_DIR/$1"
    [[ -x "$bin" ]] || return 0
    case "$1" in
        etcd) "$bin" --version 2>/dev/null | sed -n 's/^etcd Version: //p' ;;
        kubectl) "$bin" version --client 2>/dev/null | sed -n 's/^Client Version: //p' ;;
        *) "$bin" --version 2>/dev/null | sed -n 's/^Kubernetes //p' ;;
    esac
}

steps=(etcd kube-apiserver kube-controller-manager kubectl)
json=""
n=0
for name in "${steps[@]}"; do
    n=$((n + 1))
    case "$name" in
        etcd) want="$ETCD_VERSION"; moddir="$ROOT/e2e/go/etcd"; pkg="go.etcd.io/etcd/server/v3"; ldflags="-s -w" ;;
        *) want="$KUBE_VERSION"; moddir="$ROOT/e2e/go/kubernetes"; pkg="k8s.io/kubernetes/cmd/$name"; ldflags="-s -w$kube_ldflags" ;;
    esac
    prefix="e2e build: [$n/${#steps[@]}] $name $want"
    start=$(date +%s.%N)
    if [[ "$(version_of "$name")" == "$want" ]]; then
        cached=true
        end=$(date +%s.%N)
        echo "$prefix ... reusing $BIN_DIR/$name"
    else
        cached=false
        command -v go >/dev/null 2>&1 || {
            echo "$prefix ... FAILED: need 'go' (>= 1.26) on PATH to build it (or a $name reporting $want in $BIN_DIR)" >&2
            exit 1
        }
        echo "$prefix ... building $pkg (first time only; several minutes)"
        # CGO_ENABLED=0: static binaries, as Kubernetes' own release build makes them.
        # -buildvcs=false: built from the module cache, not a VCS checkout.
        (cd "$moddir" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
            go build -trimpath -ldflags "$ldflags" -o "$BIN_DIR/$name.tmp" "$pkg") || {
            echo "$prefix ... FAILED (go build in $moddir)" >&2
            rm -f "$BIN_DIR/$name.tmp"
            exit 1
        }
        mv -f "$BIN_DIR/$name.tmp" "$BIN_DIR/$name"
        end=$(date +%s.%N)
        got="$(version_of "$name")"
        if [[ "$got" != "$want" ]]; then
            echo "$prefix ... FAILED: the built binary reports version '${got}', not $want" >&2
            exit 1
        fi
        printf '%s ... built in %.0fs\n' "$prefix" "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')"
    fi
    seconds=$(printf '%.1f' "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')")
    # Keep what the build itself took next to the binary, so a run that reuses it can
    # still report the time of the first build (e2e/results.json quotes both).
    [[ "$cached" == true ]] || echo "$seconds" > "$BIN_DIR/$name.build-seconds"
    built=$(cat "$BIN_DIR/$name.build-seconds" 2>/dev/null || echo null)
    json+="${json:+,}
  \"$name\": {\"seconds\": $seconds, \"cached\": $cached, \"built_seconds\": $built, \"version\": \"$want\"}"
done

printf '{%s\n}\n' "$json" > "$TIMES"
echo "e2e build: done; binaries in $BIN_DIR, times in $TIMES"
