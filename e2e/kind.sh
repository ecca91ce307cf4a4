#!/usr/bin/env bash
# make e2e-kind: run the e2e scenarios on a kind cluster instead of the local control plane.
# Needs a Docker engine. kind is built from its Go module into build/bin (pinned); the
# image is built from the repository's Dockerfile and loaded into the cluster as
# staticfleet:e2e. The scenarios and their assertions are the same code as `make e2e`;
# only the bootstrap (e2e/cluster.py: KindCluster) differs.
#
#   e2e/kind.sh <pytest command...>     (the Makefile passes its pytest command)
set -euo pipefail

KIND_VERSION="${KIND_VERSION:-v0.31.0}"
CLUSTER="${KIND_CLUSTER:-staticfleet-e2e}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN_DIR="$ROOT/build/bin"
KIND="$BIN_DIR/kind"

command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 \
    || { echo "e2e-kind: needs a running Docker engine (use 'make e2e' without one)" >&2; exit 1; }

if ! { [[ -x "$KIND" ]] && "$KIND" version | grep -q "$KIND_VERSION"; }; then
    echo "e2e-kind: building kind $KIND_VERSION from its Go module"
    GOBIN="$BIN_DIR" go install "sigs.k8s.io/kind@$KIND_VERSION"
fi
"$ROOT/e2e/build.sh"  # kubectl pinned to the same release as the local control plane
export KUBECTL="$ROOT/build/e2e/bin/kubectl"

echo "e2e-kind: building the image staticfleet:e2e"
docker build -t staticfleet:e2e "$ROOT"

created=false
if ! "$KIND" get clusters | grep -qx "$CLUSTER"; then
    "$KIND" create cluster --name "$CLUSTER" --wait 180s
    created=true
fi
cleanup() { if [[ "$created" == true && -z "${KEEP_KIND_CLUSTER:-}" ]]; then "$KIND" delete cluster --name "$CLUSTER"; fi; }
trap cleanup EXIT

"$KIND" load docker-image staticfleet:e2e --name "$CLUSTER"
KUBECONFIG="$(mktemp)"
export KUBECONFIG
"$KIND" get kubeconfig --name "$CLUSTER" > "$KUBECONFIG"

cd "$ROOT"
STATICFLEET_E2E_CLUSTER=kind "$@"
