#!/usr/bin/env bash
# The Debian packages a real node of ours needs (docs/node.md), installed when absent:
# mmdebstrap and buildah build the image (scripts/build-image.sh); containerd, runc and the
# CNI plugins run it. Needs root and Debian's package index (`apt-get update`, once).
#
#   scripts/node/install-packages.sh
set -euo pipefail

# command -> the Debian package that ships it
declare -A PACKAGE=(
    [mmdebstrap]=mmdebstrap
    [buildah]=buildah
    [runc]=runc
    [containerd]=containerd
    [ctr]=containerd
    [/usr/lib/cni/bridge]=containernetworking-plugins
)
need=()
for cmd in "${!PACKAGE[@]}"; do
    if [[ "$cmd" == /* ]]; then [[ -x "$cmd" ]] && continue; else command -v "$cmd" >/dev/null 2>&1 && continue; fi
    [[ " ${need[*]} " == *" ${PACKAGE[$cmd]} "* ]] || need+=("${PACKAGE[$cmd]}")
done
((${#need[@]})) || exit 0
[[ "$(id -u)" == 0 ]] || { echo "node packages: need root to install ${need[*]}" >&2; exit 1; }
echo "node packages: installing ${need[*]} (Debian)"
install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; }
# A machine whose package index was never fetched knows no candidates: fetch it once and retry.
install 2>/dev/null || { apt-get update -qq && install; } || {
    echo "node packages: FAILED: apt-get install ${need[*]}" >&2
    exit 1
}
