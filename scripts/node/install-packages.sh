#!/usr/bin/env bash
# The Debian packages a real node of ours needs (docs/node.md), installed when absent:
# mmdebstrap and buildah build the image (scripts/build-image.sh); containerd, runc and the
# CNI plugins run it. Needs root and Debian's package index (`apt-get update`, once).
#
#   scripts/node/install-packages.sh
set -euo pipefail
NAME="node packages" exec "$(dirname "$0")/../install-debian-packages.sh" \
    mmdebstrap=mmdebstrap \
    buildah=buildah \
    runc=runc \
    containerd=containerd \
    ctr=containerd \
    /usr/lib/cni/bridge=containernetworking-plugins
