#!/usr/bin/env bash
# Debian packages the project's tests need, installed when absent: each argument is
# `command=package` (a command looked up on PATH, or an absolute path that must be
# executable, and the Debian package that ships it). Needs root and Debian's package index
# (`apt-get update`, once, when the index was never fetched). NAME says who asks, in its
# messages.
#
#   NAME="soak packages" scripts/install-debian-packages.sh iptables=iptables
set -euo pipefail

name="${NAME:-packages}"
need=()
for pair in "$@"; do
    cmd="${pair%%=*}"; package="${pair#*=}"
    if [[ "$cmd" == /* ]]; then [[ -x "$cmd" ]] && continue; else command -v "$cmd" >/dev/null 2>&1 && continue; fi
    [[ " ${need[*]} " == *" $package "* ]] || need+=("$package")
done
((${#need[@]})) || exit 0
[[ "$(id -u)" == 0 ]] || { echo "$name: need root to install ${need[*]}" >&2; exit 1; }
echo "$name: installing ${need[*]} (Debian)"
install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; }
# A machine whose package index was never fetched knows no candidates: fetch it once and retry.
install 2>/dev/null || { apt-get update -qq && install; } || {
    echo "$name: FAILED: apt-get install ${need[*]}" >&2
    exit 1
}
