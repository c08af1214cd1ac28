#!/usr/bin/env bash
# Prints the name of a base image for kstream's images (Python 3.11, Java 17, tini) that
# the engine behind `docker` has: the official python:3.11-slim when a registry answers,
# otherwise an offline Debian bookworm image made here with debootstrap from the host's
# Debian mirror and imported (`docker import`, about 3 minutes the first time). The offline
# image is tagged kstream-base:bookworm-<hash of its inputs> and reused while they last.
# Usage: scripts/docker/base-image.sh   (KSTREAM_DOCKER_BASE=<image> skips all of it)
set -euo pipefail

if [ -n "${KSTREAM_DOCKER_BASE:-}" ]; then echo "$KSTREAM_DOCKER_BASE"; exit 0; fi
if docker image inspect python:3.11-slim >/dev/null 2>&1 \
    || timeout 60 docker pull -q python:3.11-slim >/dev/null 2>&1; then
    echo python:3.11-slim
    exit 0
fi

SUITE=bookworm
PACKAGES=python3,python3-venv,openjdk-17-jre-headless,ca-certificates,tini,passwd
mirror() {
    # The first Debian mirror of the apt sources (deb822 or one-line format).
    { grep -hE '^\s*URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}'
      grep -hE '^\s*deb\s' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
        | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; break}}'
    } | { grep -v security || true; } | head -1
}
MIRROR=${KSTREAM_DEBIAN_MIRROR:-$(mirror || true)}
[ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
# The content hash of what goes into the image (bump FORMAT when the way it is made changes).
FORMAT=1
HASH=$(echo "$FORMAT $SUITE $PACKAGES $MIRROR" | sha256sum | cut -c1-12)
NAME=kstream-base:$SUITE-$HASH
if docker image inspect "$NAME" >/dev/null 2>&1; then echo "$NAME"; exit 0; fi

command -v debootstrap >/dev/null || {
    [ "$(id -u)" = 0 ] || { echo "base-image: no registry answers and debootstrap is missing; install debootstrap (apt-get install debootstrap) or set KSTREAM_DOCKER_BASE" >&2; exit 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
}
ROOT=$(mktemp -d /var/tmp/kstream-base.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
echo "base-image: no registry answers; building $NAME with debootstrap from $MIRROR" >&2
start=$SECONDS
rc=0
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 || rc=$?
# (a non-zero exit after "Base system installed successfully" was seen once here, with a
# complete tree: the tree is judged by its content and the log's last line)
if [ ! -x "$ROOT/usr/bin/python3" ] || ! ls "$ROOT"/usr/lib/jvm/*/bin/java >/dev/null 2>&1 \
    || { [ $rc != 0 ] && ! tail -n 1 "$ROOT.log" | grep -q 'Base system installed successfully'; }; then
    echo "base-image: debootstrap failed (exit $rc); see $ROOT.log" >&2
    tail -5 "$ROOT.log" >&2
    exit 1
fi
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* "$ROOT.log"
tar -C "$ROOT" -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
    -c 'CMD ["/bin/bash"]' - "$NAME" >/dev/null
echo "base-image: built $NAME in $((SECONDS - start)) s" >&2
echo "$NAME"
