#!/usr/bin/env bash
# `make docker-test`: kstream's Docker tests, from nothing but root on a Debian-like host.
#   1. a Docker Engine (scripts/docker/engine.sh: installed from the distribution's
#      packages if missing, dockerd started on kstream's own socket if none answers,
#      and stopped again at the end);
#   2. the images (scripts/docker/build-images.sh; the base image offline when no
#      registry answers, scripts/docker/base-image.sh);
#   3. the tests, in one pytest process (the compose test missed its phase deadline once
#      beside the others in two): integration/docker/
#      (the images themselves, compose) and a subset of integration/ against Kafka started
#      by testcontainers from the built image: the exactly-once crash test of the
#      wordcount job (`make test` runs it for all four jobs on the Maven-launched broker;
#      the orders/payments join left this list to keep CI under 35 minutes) on one broker
#      container, and the production-Kafka tests
#      of a job over SASL and of kill -9 (docker kill) of a leader on a three-node cluster
#      of three containers (integration/docker/kafka_cluster.py).
# A missing engine fails the run (never a skip). PYTHON: kstream's interpreter.
# `--alongside CMD` (what `make test` does under CI=true): runs CMD, the rest of the tests,
# while the images build (the base image's debootstrap is minutes of downloads), then the
# Docker tests if CMD passed; the exit code is CMD's, else the Docker tests'.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHON=${PYTHON:-.venv/bin/python}
alongside=""
if [ "${1:-}" = --alongside ]; then
    alongside=$2
    shift 2
fi
. scripts/docker/engine.sh
trap kstream_docker_engine_stop EXIT
kstream_docker_engine
start=$SECONDS
if [ -z "$alongside" ]; then
    scripts/docker/build-images.sh
else
    images_log=$(mktemp)
    scripts/docker/build-images.sh >"$images_log" 2>&1 &
    images=$!
    rc=0
    env -u DOCKER_HOST bash -c "$alongside" || rc=$?  # (as without CI: no engine named)
    images_rc=0
    wait "$images" || images_rc=$?
    cat "$images_log" >&2
    rm -f "$images_log"
    [ "$rc" = 0 ] || exit "$rc"
    [ "$images_rc" = 0 ] || { echo "docker-test: building the images failed" >&2; exit "$images_rc"; }
fi
echo "docker-test: images ready $((SECONDS - start)) s after the engine${alongside:+ (built alongside the other tests)}" >&2
# (not exported: the tests read docker/images.env themselves)
. docker/images.env
export TESTCONTAINERS_RYUK_DISABLED=true KSTREAM_TEST_KAFKA=testcontainers \
    KSTREAM_TEST_KAFKA_IMAGE=$IMAGE_KAFKA
"$PYTHON" -m pytest -p no:cacheprovider --durations=5 \
    integration/docker \
    "integration/test_e2e_crash.py::test_exactly_once_under_kills[wordcount]" \
    "integration/test_production_kafka.py::test_exactly_once_job_over_sasl" \
    "integration/test_production_kafka.py::test_kill_9_of_the_leader_of_control_commits_and_a_sink_partition" \
    "$@"
