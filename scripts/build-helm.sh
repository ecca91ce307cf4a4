#!/usr/bin/env bash
# Build helm from its Go module into build/bin/helm, once. Later calls reuse the binary
# as long as it reports the pinned version. Needs only `go` and the Go module proxy.
#
#   scripts/build-helm.sh [VERSION]      (default: $HELM_VERSION or the pin below)
set -euo pipefail

HELM_VERSION="${1:-${HELM_VERSION:-v3.21.4}}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN_DIR="$ROOT/build/bin"
HELM="$BIN_DIR/helm"

if [[ -x "$HELM" ]] && "$HELM" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
    echo "helm: reusing $HELM ($HELM_VERSION)"
    exit 0
fi

command -v go >/dev/null 2>&1 || { echo "helm: need 'go' on PATH to build helm $HELM_VERSION" >&2; exit 1; }

mkdir -p "$BIN_DIR"
start=$(date +%s)
# Helm's own Makefile stamps the Kubernetes version its client-go speaks (client-go v0.X.Y ->
# Kubernetes 1.X) as the default .Capabilities.KubeVersion of `helm template`/`helm lint`.
# Without it a `go install` build claims Kubernetes 1.20. Read it from helm's go.mod.
echo "helm: fetching helm.sh/helm/v3@$HELM_VERSION from the Go module proxy"
mod_dir=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
kube_minor=$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$mod_dir/go.mod" | head -1)
[[ -n "$kube_minor" ]] || { echo "helm: cannot read k8s.io/client-go's version from $mod_dir/go.mod" >&2; exit 1; }
echo "helm: building helm.sh/helm/v3/cmd/helm@$HELM_VERSION (Kubernetes 1.$kube_minor) into $HELM (first time only; a few minutes)"
# -buildvcs=false: the module is built from the module cache, not a VCS checkout.
# The ldflags stamp the version the way helm's own Makefile does, so `helm version` and
# the chart's .Capabilities.HelmVersion report it (otherwise helm says v3.x-dev... or v0).
GOBIN="$BIN_DIR" GOFLAGS="${GOFLAGS:-} -buildvcs=false" go install \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
        -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$kube_minor \
        -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$kube_minor" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
end=$(date +%s)
echo "helm: built $("$HELM" version --short) in $((end - start))s"
