#!/usr/bin/env bash
# Build a real node's binaries into build/node/bin, once, as e2e/build.sh builds the control
# plane: kubelet, kube-proxy and kube-scheduler v1.36.3 (the control plane's release; e2e/node/go/kubernetes),
# containerd v2 with its runc shim (e2e/node/go/containerd), CoreDNS (e2e/node/go/coredns),
# and the pod sandbox's pause
# (e2e/node/go/pause) with its image, build/node/pause.oci.tar. Later calls reuse a binary
# that reports its pin. Needs `go` and the Go module proxy (buildah for the pause image).
# See docs/node.md.
#
#   scripts/node/build.sh                 # all
#   scripts/node/build.sh kube pause      # some: kube, containerd, coredns, pause
set -euo pipefail

KUBE_VERSION="v1.36.3"   # e2e/node/go/kubernetes/go.mod pins k8s.io/kubernetes and its staging modules

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN_DIR="$ROOT/build/node/bin"
mkdir -p "$BIN_DIR"

kube_minor="${KUBE_VERSION#v1.}"; kube_minor="${kube_minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

build_kube() {
    for name in kubelet kube-proxy kube-scheduler; do
        bin="$BIN_DIR/$name"
        if [[ -x "$bin" && "$("$bin" --version 2>/dev/null)" == "Kubernetes $KUBE_VERSION" ]]; then
            echo "node build: $name $KUBE_VERSION ... reusing $bin"
            continue
        fi
        command -v go >/dev/null 2>&1 || { echo "node build: FAILED: need 'go' (>= 1.26) on PATH" >&2; exit 1; }
        echo "node build: $name $KUBE_VERSION ... building (first time only; ~10 minutes on 2 cores)"
        start=$(date +%s)
        # CGO_ENABLED=0: static binaries, as Kubernetes' release builds its kubelet and kube-proxy.
        (cd "$ROOT/e2e/node/go/kubernetes" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
            nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$bin.tmp" "k8s.io/kubernetes/cmd/$name") || {
            rm -f "$bin.tmp"
            echo "node build: FAILED (go build of $name in e2e/node/go/kubernetes)" >&2
            exit 1
        }
        mv -f "$bin.tmp" "$bin"
        echo "node build: $name built in $(( $(date +%s) - start ))s"
    done
}

# CoreDNS (e2e/node/go/coredns: CoreDNS's main with the plugins the node's Corefile uses), the
# cluster DNS the node's pods resolve Service names with (e2e/node/services.py).
build_coredns() {
    COREDNS_VERSION="v1.15.0"   # e2e/node/go/coredns/go.mod
    bin="$BIN_DIR/coredns"
    stamp="$bin.version"
    if [[ -x "$bin" && "$(cat "$stamp" 2>/dev/null)" == "$COREDNS_VERSION" ]]; then
        echo "node build: coredns $COREDNS_VERSION ... reusing $bin"
        return
    fi
    echo "node build: coredns $COREDNS_VERSION ... building"
    start=$(date +%s)
    (cd "$ROOT/e2e/node/go/coredns" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
        nice -n 10 go build -trimpath -ldflags "-s -w" -o "$bin.tmp" .) || {
        rm -f "$bin.tmp"
        echo "node build: FAILED (go build in e2e/node/go/coredns)" >&2
        exit 1
    }
    mv -f "$bin.tmp" "$bin"
    echo "$COREDNS_VERSION" >"$stamp"
    echo "node build: coredns built in $(( $(date +%s) - start ))s"
}

# containerd v2 (and its runc shim, and ctr): Debian bookworm's containerd 1.6 has no CRI
# RuntimeConfig call, without which kubelet v1.36 does not start (docs/node.md).
build_containerd() {
    CONTAINERD_VERSION="v2.4.2"   # e2e/node/go/containerd/go.mod
    for name in containerd containerd-shim-runc-v2 ctr; do
        bin="$BIN_DIR/$name"
        stamp="$bin.version"
        if [[ -x "$bin" && "$(cat "$stamp" 2>/dev/null)" == "$CONTAINERD_VERSION" ]]; then
            echo "node build: $name $CONTAINERD_VERSION ... reusing $bin"
            continue
        fi
        echo "node build: $name $CONTAINERD_VERSION ... building"
        start=$(date +%s)
        # No btrfs, devmapper or zfs snapshotters: overlayfs is the node's, and they need cgo.
        (cd "$ROOT/e2e/node/go/containerd" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
            nice -n 10 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
            -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
            -o "$bin.tmp" "github.com/containerd/containerd/v2/cmd/$name") || {
            rm -f "$bin.tmp"
            echo "node build: FAILED (go build of $name in e2e/node/go/containerd)" >&2
            exit 1
        }
        mv -f "$bin.tmp" "$bin"
        echo "$CONTAINERD_VERSION" >"$stamp"
        echo "node build: $name built in $(( $(date +%s) - start ))s"
    done
}

# The pod sandbox image: our pause (e2e/node/go/pause) alone in an image, as an OCI archive
# named as containerd's config pins it (e2e/node/containerd.py, PAUSE_IMAGE).
build_pause() {
    PAUSE_REF="registry.k8s.io/pause:3.10.1"
    (cd "$ROOT/e2e/node/go/pause" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/pause.tmp" .)
    # Replaced only when it changed: a newer binary remakes the archive below.
    if cmp -s "$BIN_DIR/pause.tmp" "$BIN_DIR/pause"; then rm -f "$BIN_DIR/pause.tmp"; else mv -f "$BIN_DIR/pause.tmp" "$BIN_DIR/pause"; fi
    pause_archive="$ROOT/build/node/pause.oci.tar"
    if [[ ! -s "$pause_archive" || "$BIN_DIR/pause" -nt "$pause_archive" ]]; then
        echo "node build: $pause_archive ($PAUSE_REF)"
        "$ROOT/scripts/node/install-packages.sh"
        STORE="$ROOT/build/image/containers"
        bah() { buildah --root "$STORE/root" --runroot "$STORE/run" --storage-driver overlay \
            --storage-opt overlay.skip_mount_home=true "$@"; }
        ctr_id=$(bah from --pull=never scratch)
        trap 'bah rm "$ctr_id" >/dev/null 2>&1 || true' EXIT
        bah copy "$ctr_id" "$BIN_DIR/pause" /pause >/dev/null
        bah config --entrypoint '["/pause"]' --user 65535:65535 "$ctr_id"
        bah commit --quiet --rm "$ctr_id" localhost/staticfleet-pause:latest >/dev/null
        trap - EXIT
        rm -f "$pause_archive.tmp"
        bah push --quiet localhost/staticfleet-pause:latest "oci-archive:$pause_archive.tmp:$PAUSE_REF" >/dev/null
        mv -f "$pause_archive.tmp" "$pause_archive"
    fi
}

for part in "${@:-kube containerd coredns pause}"; do
    for one in $part; do
        case "$one" in
            kube | containerd | coredns | pause) "build_$one" ;;
            *) echo "node build: unknown part '$one' (kube, containerd, coredns, pause)" >&2; exit 2 ;;
        esac
    done
done
