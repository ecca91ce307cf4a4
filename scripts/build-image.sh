#!/usr/bin/env bash
# Build the chart's image from the repository's Dockerfile with no container registry:
#   1. the base: Debian bookworm made by mmdebstrap from Debian's packages
#      (image/base-packages.txt), with a venv at /opt/python first on PATH; cached as
#      build/image/base/<hash>.tar by a hash of the package list and this script's recipe;
#   2. imported into buildah's storage (build/image/containers) as localhost/staticfleet-base:<hash>;
#   3. `buildah build` of the Dockerfile with --build-arg PYTHON_IMAGE=that base (PyPI is the
#      only network the build reaches: pip, in the Dockerfile's build stage);
#   4. written as an OCI archive, build/image/staticfleet.oci.tar, whose image is named
#      docker.io/library/staticfleet:<version>: what the chart's `staticfleet:<appVersion>`
#      means to a containerd (`ctr -n k8s.io image import` loads it for a kubelet).
# Records sizes and times in build/image/build.json. Needs root, mmdebstrap and buildah
# (Debian packages; scripts/node/install-packages.sh installs them). See docs/node.md.
# Each TARGET named (a target of image/clients.Dockerfile: rdkafka, java, spark) is then built over that
# image as localhost/staticfleet-TARGET:<version>, written as build/image/staticfleet-TARGET.oci.tar
# (docker.io/library/staticfleet-TARGET:<version>): a Kafka client family's member image.
#
#   scripts/build-image.sh [TARGET...]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/build/image"
STORE="$OUT/containers"
PACKAGES="$ROOT/image/base-packages.txt"
SUITE="bookworm"
VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/pyproject.toml" | head -n1)"
IMAGE="localhost/staticfleet:$VERSION"
ARCHIVE="$OUT/staticfleet.oci.tar"
ARCHIVE_REF="docker.io/library/staticfleet:$VERSION"

say() { echo "build-image: $*"; }
fail() { echo "build-image: FAILED: $*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

[[ "$(id -u)" == 0 ]] || fail "needs root (mmdebstrap and buildah make a root filesystem and mount layers)"
[[ -n "$VERSION" ]] || fail "no version = \"...\" in $ROOT/pyproject.toml"
CLIENTS_DOCKERFILE="$ROOT/image/clients.Dockerfile"
for target in "$@"; do
    # The Java peer's jars (build/java-peer, the `javapeer` build context), built by Maven.
    [[ "$target" != java ]] || "$ROOT/scripts/build-java-peer.sh"
    grep -q "^FROM .* AS $target\$" "$CLIENTS_DOCKERFILE" \
        || fail "no target $target in $CLIENTS_DOCKERFILE"
done
"$ROOT/scripts/node/install-packages.sh"

# buildah keeps its layers under build/; the overlay driver, as Docker's and containerd's.
# skip_mount_home: no bind mount of the storage onto itself is left behind on the host.
BUILDAH=(buildah --root "$STORE/root" --runroot "$STORE/run" --storage-driver overlay
         --storage-opt overlay.skip_mount_home=true)
bah() { "${BUILDAH[@]}" "$@"; }
# Whatever way the script ends, no working container and no layer stays mounted.
cleanup() { bah rm --all >/dev/null 2>&1 || true; bah umount --all >/dev/null 2>&1 || true; }
trap cleanup EXIT

mkdir -p "$OUT/base"
start_all=$(now)

# --- 1. the base root filesystem (cached) ----------------------------------------------------
mapfile -t packages < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$PACKAGES" | grep -v '^$')
((${#packages[@]})) || fail "no packages in $PACKAGES"
include="$(IFS=,; echo "${packages[*]}")"
# What the hash covers: the suite, the packages and the recipe lines below (keep them in sync).
recipe="suite=$SUITE variant=minbase include=$include venv=/opt/python slim=doc,man,info,locale,apt-lists v2"
hash="$(printf '%s' "$recipe" | sha256sum | cut -c1-16)"
base_tar="$OUT/base/$hash.tar"
BASE_IMAGE="localhost/staticfleet-base:$hash"

start=$(now)
if [[ -s "$base_tar" ]]; then
    base_cached=true
    say "[1/4] base $SUITE ($include) ... reusing $base_tar"
else
    base_cached=false
    say "[1/4] base $SUITE ($include) ... mmdebstrap"
    # No mirror given: mmdebstrap uses Debian's, with bookworm-updates and -security.
    # Documentation and locales are left out, as in Docker's slim images.
    nice -n 10 mmdebstrap --quiet --variant=minbase --include="$include" \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook='chroot "$1" python3.11 -m venv /opt/python' \
        --customize-hook='chroot "$1" /opt/python/bin/python -c "import ssl, venv, ensurepip"' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*' \
        "$SUITE" "$base_tar.partial.tar" || { rm -f "$base_tar.partial.tar"; fail "mmdebstrap $SUITE"; }
    mv -f "$base_tar.partial.tar" "$base_tar"
fi
base_seconds=$(since "$start")

# --- 2. the base as an image in buildah's storage --------------------------------------------
start=$(now)
if bah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
    say "[2/4] $BASE_IMAGE ... reusing"
else
    say "[2/4] $BASE_IMAGE ... importing $base_tar"
    ctr=$(bah from --pull=never scratch)
    bah add "$ctr" "$base_tar" / >/dev/null
    # The environment python:3.11-slim gives its users: its Python first on PATH, UTF-8.
    bah config --env PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --env LANG=C.UTF-8 --cmd python3 --created-by "scripts/build-image.sh (mmdebstrap $SUITE)" "$ctr"
    bah commit --quiet --rm "$ctr" "$BASE_IMAGE" >/dev/null
fi
import_seconds=$(since "$start")

# --- 3. the Dockerfile ----------------------------------------------------------------------
start=$(now)
say "[3/4] $IMAGE ... buildah build (Dockerfile, PYTHON_IMAGE=$BASE_IMAGE)"
# pip in the build's RUN steps trusts what the host trusts: where the host reaches PyPI
# through a TLS-inspecting proxy, its CA is in the host's bundle, not in the base's. The host's
# bundle is bind-mounted over the base's (Debian's pip reads that path), in RUN steps only:
# it is in no layer, and the mount point exists already, so no empty file is left either.
host_ca="${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}"
trust=()
[[ -s "$host_ca" ]] && trust=(--volume "$host_ca:/etc/ssl/certs/ca-certificates.crt:ro")
# --network host: the build stage's pip reaches PyPI without a bridge and NAT rules made for
# it (nothing is left on the host); --layers: unchanged steps are reused between builds.
nice -n 10 "${BUILDAH[@]}" build --quiet --layers --force-rm --pull=never --network host "${trust[@]}" \
    --build-arg "PYTHON_IMAGE=$BASE_IMAGE" -f "$ROOT/Dockerfile" -t "$IMAGE" "$ROOT" >/dev/null \
    || fail "buildah build of $ROOT/Dockerfile"
build_seconds=$(since "$start")

# Writes $1 (a local image) as the OCI archive $2 named $3, unless the archive of that very
# image is there already (its image id kept beside it): an unchanged image keeps its archive.
archive() {
    local id; id="$(bah inspect --type image --format '{{.FromImageID}}' "$1")"
    if [[ -s "$2" && "$(cat "$2.id" 2>/dev/null)" == "$id" ]]; then
        return 0
    fi
    rm -f "$2.tmp"
    bah push --quiet "$1" "oci-archive:$2.tmp:$3" >/dev/null || fail "buildah push to $2"
    mv -f "$2.tmp" "$2"
    echo "$id" >"$2.id"
}

# --- 4. the OCI archive ---------------------------------------------------------------------
start=$(now)
say "[4/4] $ARCHIVE ($ARCHIVE_REF)"
archive "$IMAGE" "$ARCHIVE" "$ARCHIVE_REF"
image_id="$(cat "$ARCHIVE.id")"
archive_seconds=$(since "$start")

# --- the client images named (image/clients.Dockerfile) --------------------------------------
clients_json=""
for target in "$@"; do
    start=$(now)
    client="localhost/staticfleet-$target:$VERSION"
    client_archive="$OUT/staticfleet-$target.oci.tar"
    context=()
    [[ "$target" != java ]] || context=(--build-context "javapeer=$ROOT/build/java-peer")
    say "[client] $client ... buildah build (image/clients.Dockerfile, target $target)"
    nice -n 10 "${BUILDAH[@]}" build --quiet --layers --force-rm --pull=never --network host "${trust[@]}" \
        --build-arg "STATICFLEET_IMAGE=$IMAGE" --target "$target" -f "$CLIENTS_DOCKERFILE" \
        "${context[@]}" \
        -t "$client" "$ROOT" >/dev/null || fail "buildah build of $CLIENTS_DOCKERFILE, target $target"
    archive "$client" "$client_archive" "docker.io/library/staticfleet-$target:$VERSION"
    clients_json+="${clients_json:+, }\"$target\": {\"image\": \"$client\", \"image_size\": \"$(bah images --format '{{.Size}}' --noheading "$client" | head -n1)\", \"archive_bytes\": $(stat -c %s "$client_archive"), \"seconds\": $(since "$start")}"
done

image_bytes="$(bah images --format '{{.Size}}' --noheading "$IMAGE" | head -n1)"
cat >"$OUT/build.json" <<EOF
{
  "image": "$IMAGE",
  "image_id": "$image_id",
  "image_size": "$image_bytes",
  "archive": "build/image/staticfleet.oci.tar",
  "archive_ref": "$ARCHIVE_REF",
  "archive_bytes": $(stat -c %s "$ARCHIVE"),
  "base": {"image": "$BASE_IMAGE", "tar_bytes": $(stat -c %s "$base_tar"), "cached": $base_cached},
  "clients": {$clients_json},
  "seconds": {"base": $base_seconds, "import": $import_seconds, "build": $build_seconds,
              "archive": $archive_seconds, "total": $(since "$start_all")}
}
EOF
say "done in $(since "$start_all")s: $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1)); times in $OUT/build.json"
