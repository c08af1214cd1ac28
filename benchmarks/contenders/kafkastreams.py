"""Kafka Streams, workloads 1, 2, 3 and recovery: ``contenders/kafkastreams/BenchApp.java``.

This launcher takes the contender arguments (``workloads.contender_parser``) plus
``--job stateless|window``, compiles the Java source once (cached, see
``benchmarks/jvm.py``) and replaces itself with the JVM (``exec``): the harness's
process, rusage and kill -9 are the JVM's. The JVM prints the report line.
"""

from __future__ import annotations

import argparse
import os
import sys

from benchmarks.jvm import JAVA_MAIN, kafka_streams_app
from benchmarks.workloads import contender_parser

#: The JVM's options: a fixed heap large enough for 1 M keys in the suppression buffer.
JVM_OPTS = ("-Xms1g", "-Xmx2g", "-XX:+UseG1GC", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")


def java_args(a: argparse.Namespace) -> list[str]:
    """``BenchApp``'s options for the contender arguments ``a``."""
    args = [
        "--job", a.job, "--bootstrap", a.bootstrap, "--input", a.input, "--output", a.output,
        "--group", a.group, "--guarantee", a.guarantee, "--window-ms", str(a.window_ms),
        "--commit-interval-ms", str(round(a.commit_interval * 1000)),
        "--state-dir", a.state_dir or os.path.join(os.getcwd(), f"ks-state-{a.group}"),
    ]  # fmt: skip
    if a.end_offsets is not None:
        args += ["--ends", ",".join(f"{p}={o}" for p, o in sorted(a.end_offsets.ends.items()))]
    if a.instance_id:
        args += ["--instance-id", a.instance_id]
    if a.forever:
        args.append("--forever")
    return args


def main() -> None:
    p = contender_parser(__doc__ or "")
    p.add_argument("--job", choices=("stateless", "window"), required=True)
    a = p.parse_args()
    argv = kafka_streams_app().argv(JAVA_MAIN, java_args(a), JVM_OPTS)
    sys.stdout.flush()
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
