#!/usr/bin/env bash
# Build a real node's Kubernetes binaries into build/node/bin, once: kubelet and kube-proxy
# v1.36.3 (the e2e control plane's release), from the Go module e2e/node/go, as e2e/build.sh
# builds the control plane. Later calls reuse a binary whose --version reports the pin.
# Needs only `go` and the Go module proxy. See docs/node.md.
#
#   scripts/node/build.sh
set -euo pipefail

KUBE_VERSION="v1.36.3"   # e2e/node/go/go.mod pins k8s.io/kubernetes and its staging modules

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN_DIR="$ROOT/build/node/bin"
mkdir -p "$BIN_DIR"

kube_minor="${KUBE_VERSION#v1.}"; kube_minor="${kube_minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

for name in kubelet kube-proxy; do
    bin="$BIN_DIR/$name"
    if [[ -x "$bin" && "$("$bin" --version 2>/dev/null)" == "Kubernetes $KUBE_VERSION" ]]; then
        echo "node build: $name $KUBE_VERSION ... reusing $bin"
        continue
    fi
    command -v go >/dev/null 2>&1 || { echo "node build: FAILED: need 'go' (>= 1.26) on PATH" >&2; exit 1; }
    echo "node build: $name $KUBE_VERSION ... building (first time only; ~10 minutes on 2 cores)"
    start=$(date +%s)
    # CGO_ENABLED=0: static binaries, as Kubernetes' release builds its kubelet and kube-proxy.
    (cd "$ROOT/e2e/node/go" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
        nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$bin.tmp" "k8s.io/kubernetes/cmd/$name") || {
        rm -f "$bin.tmp"
        echo "node build: FAILED (go build of $name in e2e/node/go)" >&2
        exit 1
    }
    mv -f "$bin.tmp" "$bin"
    echo "node build: $name built in $(( $(date +%s) - start ))s"
done
