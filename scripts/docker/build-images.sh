#!/usr/bin/env bash
# Builds kstream's images on the engine behind `docker`, from BASE (first argument;
# default: scripts/docker/base-image.sh's answer), without network inside the builds:
#   kstream:dev                      docker/Dockerfile, from a wheelhouse made here (pip wheel)
#   kstream-test/kafka:<version>     docker/kafka, from the Maven Central jars kstream resolves
#   kstream-test/s3proxy:<version>   docker/s3proxy, likewise
#   kstream-test/prometheus:<ver>    docker/prometheus-image, from Debian's prometheus package
# Prints each image's build time and size. PYTHON: the interpreter with kstream installed
# (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-.venv/bin/python}
BASE=${1:-$(scripts/docker/base-image.sh)}

build() {  # build TAG CONTEXT [docker build args...]
    local tag=$1 context=$2 start=$SECONDS
    shift 2
    local log
    log=$(mktemp)
    # (the legacy builder's deprecation notice is noise here: shown only on failure)
    docker build -q --network host --build-arg "BASE=$BASE" -t "$tag" "$@" "$context" \
        >"$log" 2>&1 || { cat "$log" >&2; rm -f "$log"; exit 1; }
    rm -f "$log"
    local size
    size=$(docker image inspect -f '{{.Size}}' "$tag")
    printf 'build-images: %-34s %4d s  %5d MB\n' "$tag" $((SECONDS - start)) $((size / 1000000)) >&2
}

# kstream: its wheel and every dependency's, so that the image build installs offline.
rm -f docker/wheelhouse/kstream-*.whl
"$PYTHON" -m pip wheel --quiet --disable-pip-version-check -w docker/wheelhouse . >/dev/null
build kstream:dev . -f docker/Dockerfile

# Kafka and S3Proxy: the jars kstream's own launchers run (resolved once, cached).
eval "$("$PYTHON" - <<'PY'
from kstream.dev import localbroker, maven, s3proxy
print(f"KAFKA_LIBS={localbroker.resolve_libs()} KAFKA_VERSION={localbroker.KAFKA_VERSION}")
libs = maven.resolve(s3proxy.s3proxy_jars(), error=s3proxy.S3ProxyError)
print(f"S3PROXY_LIBS={libs} S3PROXY_VERSION={s3proxy.S3PROXY_VERSION}")
PY
)"
rm -rf docker/kafka/libs docker/s3proxy/libs
cp -r "$KAFKA_LIBS" docker/kafka/libs
cp -r "$S3PROXY_LIBS" docker/s3proxy/libs
build "kstream-test/kafka:$KAFKA_VERSION" docker/kafka
build "kstream-test/s3proxy:$S3PROXY_VERSION" docker/s3proxy

# Prometheus: the server binary of Debian's package.
work=$(mktemp -d)
(cd "$work" && apt-get download prometheus >/dev/null 2>&1) \
    || { echo "build-images: apt-get download prometheus failed (needs Debian's apt sources)" >&2; exit 1; }
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
cp "$work/root/usr/bin/prometheus" docker/prometheus-image/prometheus
PROM_VERSION=$(basename "$work"/prometheus_*.deb | cut -d_ -f2 | cut -d+ -f1)
rm -rf "$work"
build "kstream-test/prometheus:$PROM_VERSION" docker/prometheus-image

# What the tests use (sourced as shell assignments by scripts/docker/test.sh).
cat > docker/images.env <<ENV
IMAGE_KSTREAM=kstream:dev
IMAGE_KAFKA=kstream-test/kafka:$KAFKA_VERSION
IMAGE_S3=kstream-test/s3proxy:$S3PROXY_VERSION
IMAGE_PROMETHEUS=kstream-test/prometheus:$PROM_VERSION
ENV
