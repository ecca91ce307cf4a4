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

# Build package PKG of the Go module in MODDIR into build/node/bin/NAME, unless the
# binary's stamp (NAME.version) already says VERSION: binaries that do not report their own
# pinned version the way Kubernetes' do.
#   go_build_stamped NAME VERSION MODDIR PKG TAGS LDFLAGS
go_build_stamped() {
    local name="$1" version="$2" moddir="$3" pkg="$4" tags="$5" flags="$6"
    local bin="$BIN_DIR/$name" stamp="$BIN_DIR/$name.version" start
    if [[ -x "$bin" && "$(cat "$stamp" 2>/dev/null)" == "$version" ]]; then
        echo "node build: $name $version ... reusing $bin"
        return
    fi
    echo "node build: $name $version ... building"
    start=$(date +%s)
    (cd "$moddir" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
        nice -n 10 go build -trimpath -tags "$tags" -ldflags "$flags" -o "$bin.tmp" "$pkg") || {
        rm -f "$bin.tmp"
        echo "node build: FAILED (go build of $name in ${moddir#"$ROOT"/})" >&2
        exit 1
    }
    mv -f "$bin.tmp" "$bin"
    echo "$version" >"$stamp"
    echo "node build: $name built in $(( $(date +%s) - start ))s"
}

# CoreDNS (e2e/node/go/coredns: CoreDNS's main with the plugins the node's Corefile uses), the
# cluster DNS the node's pods resolve Service names with (e2e/node/services.py).
build_coredns() {
    go_build_stamped coredns "v1.15.0" "$ROOT/e2e/node/go/coredns" . "" "-s -w"   # its go.mod's pin
}

# containerd v2 (and its runc shim, and ctr): Debian bookworm's containerd 1.6 has no CRI
# RuntimeConfig call, without which kubelet v1.36 does not start (docs/node.md).
build_containerd() {
    CONTAINERD_VERSION="v2.4.2"   # e2e/node/go/containerd/go.mod
    for name in containerd containerd-shim-runc-v2 ctr; do
        # No btrfs, devmapper or zfs snapshotters: overlayfs is the node's, and they need cgo.
        go_build_stamped "$name" "$CONTAINERD_VERSION" "$ROOT/e2e/node/go/containerd" \
            "github.com/containerd/containerd/v2/cmd/$name" "no_btrfs no_devmapper no_zfs" \
            "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
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
