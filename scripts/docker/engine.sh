#!/usr/bin/env bash
# A Docker Engine for kstream's Docker tests. Source it (`. scripts/docker/engine.sh`), then
# call `kstream_docker_engine`: afterwards `docker` answers through DOCKER_HOST.
#   1. An engine that already answers (DOCKER_HOST, or the default socket) is used as it is.
#   2. Otherwise, without `dockerd`, Docker Engine is installed from the distribution's
#      packages (Debian/Ubuntu: docker.io; needs root).
#   3. Otherwise dockerd is started on a socket of kstream's own
#      (/run/kstream-docker/docker.sock, data in /var/lib/kstream-docker), never on the
#      default socket, so that nothing else on the machine starts using it by accident;
#      `kstream_docker_engine_stop` (call it from an EXIT trap) stops what was started here.
# Every failure prints one line naming the cause and what to do, and returns non-zero.

KSTREAM_DOCKER_RUN=${KSTREAM_DOCKER_RUN:-/run/kstream-docker}
KSTREAM_DOCKER_ROOT=${KSTREAM_DOCKER_ROOT:-/var/lib/kstream-docker}
KSTREAM_DOCKER_STARTED=""

_kstream_docker_answers() { timeout 20 docker info >/dev/null 2>&1; }

kstream_docker_engine() {
    if command -v docker >/dev/null && _kstream_docker_answers; then
        return 0
    fi
    local own="unix://$KSTREAM_DOCKER_RUN/docker.sock"
    export DOCKER_HOST="$own"
    if command -v docker >/dev/null && _kstream_docker_answers; then
        return 0  # kstream's own engine, left running by an earlier run
    fi
    if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
        if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
            echo "docker-test: no Docker Engine answers and none is installed; install Docker Engine (Debian: apt-get install docker.io) or set DOCKER_HOST to one" >&2
            return 1
        fi
        echo "docker-test: installing Docker Engine (apt-get install docker.io docker-compose)" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io docker-compose >/dev/null \
            || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io docker-compose >/dev/null; } \
            || { echo "docker-test: apt-get install docker.io failed; install Docker Engine by hand" >&2; return 1; }
    fi
    if [ "$(id -u)" != 0 ]; then
        echo "docker-test: no Docker daemon answers and starting one needs root; start Docker (or run as root)" >&2
        return 1
    fi
    mkdir -p "$KSTREAM_DOCKER_RUN" "$KSTREAM_DOCKER_ROOT"
    echo "docker-test: starting dockerd on $own (log $KSTREAM_DOCKER_RUN/dockerd.log)" >&2
    # No default bridge and no iptables rules: the tests run containers on the host
    # network (or on a network they create), and the host's firewall (its FORWARD
    # policy, which dockerd would set to DROP) stays as it is for everything else.
    dockerd -H "$own" --data-root "$KSTREAM_DOCKER_ROOT" \
        --bridge=none --iptables=false --ip6tables=false --ip-forward=false \
        --exec-root "$KSTREAM_DOCKER_RUN/exec" --pidfile "$KSTREAM_DOCKER_RUN/docker.pid" \
        >"$KSTREAM_DOCKER_RUN/dockerd.log" 2>&1 &
    KSTREAM_DOCKER_STARTED=$!
    local deadline=$((SECONDS + 60))
    until _kstream_docker_answers; do
        if ! kill -0 "$KSTREAM_DOCKER_STARTED" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
            echo "docker-test: dockerd did not answer on $own within 60 s; see $KSTREAM_DOCKER_RUN/dockerd.log:" >&2
            tail -5 "$KSTREAM_DOCKER_RUN/dockerd.log" >&2
            kstream_docker_engine_stop
            return 1
        fi
        sleep 0.5
    done
}

kstream_docker_engine_stop() {
    [ -n "$KSTREAM_DOCKER_STARTED" ] || return 0
    kill -TERM "$KSTREAM_DOCKER_STARTED" 2>/dev/null || true
    local deadline=$((SECONDS + 30))
    while kill -0 "$KSTREAM_DOCKER_STARTED" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
    kill -KILL "$KSTREAM_DOCKER_STARTED" 2>/dev/null || true
    KSTREAM_DOCKER_STARTED=""
}
