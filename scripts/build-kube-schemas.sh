#!/usr/bin/env bash
# JSON schemas for kubeconform into build/kube-schemas, with nothing fetched at check time:
# Kubernetes' kinds from the OpenAPI document of the k8s.io/kubernetes module the e2e control
# plane is built from (its version read from e2e/go/kubernetes/go.mod), the project's CRDs
# (crds/, the chart's Kopf peering CRDs), and the CRDs of what the chart can render beside:
# the Prometheus Operator's (ServiceMonitor, PodMonitor, PrometheusRule) and cert-manager's
# (Certificate, Issuer), from their Go modules at the versions below. Go's module cache and
# checksum database verify every download; later runs reuse the cache (about a second).
#
#   scripts/build-kube-schemas.sh        (make kube-schemas; make chart-lint runs it)
set -euo pipefail

PROMETHEUS_OPERATOR_VERSION="v0.85.0"
CERT_MANAGER_VERSION="v1.21.2"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/build/kube-schemas"
PY="${PY:-$ROOT/.venv/bin/python}"

command -v go >/dev/null 2>&1 || { echo "kube-schemas: need 'go' on PATH" >&2; exit 1; }

# Tests on parallel workers ask for the schemas while others validate against them: one run
# at a time (a lock), none when the inputs are those the schemas were made from, and a new
# set swapped in whole, never removed under a reader.
mkdir -p "$ROOT/build"
exec 9>"$ROOT/build/kube-schemas.lock"
flock 9
inputs=$(cat "${BASH_SOURCE[0]}" "$ROOT/scripts/kube_schemas.py" "$ROOT/e2e/go/kubernetes/go.mod" \
    "$ROOT"/crds/*.yaml "$ROOT/charts/staticfleet/crds/kopf-peerings.yaml" | sha256sum | cut -d' ' -f1)
if [[ -f "$OUT/.inputs" && "$(cat "$OUT/.inputs")" == "$inputs" ]]; then
    exit 0
fi
kube_version=$(sed -n 's/^[[:space:]]*k8s.io\/kubernetes \(v[0-9.]*\).*/\1/p' "$ROOT/e2e/go/kubernetes/go.mod" | head -1)
[[ -n "$kube_version" ]] || { echo "kube-schemas: no k8s.io/kubernetes in e2e/go/kubernetes/go.mod" >&2; exit 1; }

module_dir() {  # the module's directory in Go's module cache, downloaded once
    go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}
kube=$(module_dir "k8s.io/kubernetes@$kube_version")
prom=$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")
certs=$(module_dir "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION")

fresh="$OUT.new.$$"
rm -rf "$fresh"
"$PY" "$ROOT/scripts/kube_schemas.py" --output "$fresh" \
    --swagger "$kube/api/openapi-spec/swagger.json" \
    --crds "$ROOT"/crds/*.yaml "$ROOT/charts/staticfleet/crds/kopf-peerings.yaml" \
        "$prom"/example/prometheus-operator-crd/monitoring.coreos.com_{servicemonitors,podmonitors,prometheusrules}.yaml \
        "$certs"/deploy/crds/cert-manager.io_{certificates,issuers}.yaml
echo "$inputs" > "$fresh/.inputs"
stale="$OUT.old.$$"
if [[ -d "$OUT" ]]; then mv "$OUT" "$stale"; fi
mv "$fresh" "$OUT"
rm -rf "$stale"
