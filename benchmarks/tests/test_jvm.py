"""Java classpath assembly, Maven poms and the compile cache key (no Maven, no javac)."""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks.contenders.kafkastreams import java_args
from benchmarks.jvm import KAFKA_STREAMS, JavaApp, broker_tools, classpath, resolve, sources_key
from benchmarks.workloads import contender_parser
from kstream.dev.maven import resolution_pom


def test_classpath_lists_jars_sorted_and_class_dirs_as_themselves(tmp_path: Path) -> None:
    libs = tmp_path / "libs"
    libs.mkdir()
    for name in ("zstd-jni.jar", "kafka-streams-4.1.1.jar", "notes.txt"):
        (libs / name).write_text("")
    classes = tmp_path / "classes"
    classes.mkdir()
    cp = classpath(classes, libs).split(os.pathsep)
    assert cp == [str(classes), str(libs / "kafka-streams-4.1.1.jar"), str(libs / "zstd-jni.jar")]


def test_pom_names_every_artifact_and_kafka_streams_brings_rocksdb_through_it() -> None:
    pom = resolution_pom(KAFKA_STREAMS)
    assert (
        "<groupId>org.apache.kafka</groupId><artifactId>kafka-streams</artifactId>"
        "<version>4.1.1</version>" in pom
    )
    assert "<artifactId>jackson-databind</artifactId>" in pom
    tools = resolution_pom(broker_tools("4.1.1"))
    assert "<artifactId>kafka-tools</artifactId><version>4.1.1</version>" in tools


def test_a_resolved_set_is_found_in_the_cache_without_maven(tmp_path: Path) -> None:
    home = tmp_path / "kstream" / "bench-kafka-tools-4.1.1"
    (home / "libs").mkdir(parents=True)
    (home / ".complete").write_text("4.1.1\n")
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": ""}  # no mvn on PATH: must not be needed
    assert resolve(broker_tools("4.1.1"), env) == home / "libs"


def test_compile_cache_key_follows_sources_and_jar_versions(tmp_path: Path) -> None:
    src = tmp_path / "A.java"
    src.write_text("class A {}")
    cp1 = os.pathsep.join(["/c/kafka-streams-4.1.1.jar", "/c/rocksdbjni-9.7.3.jar"])
    cp2 = os.pathsep.join(["/c/kafka-streams-4.1.2.jar", "/c/rocksdbjni-9.7.3.jar"])
    k = sources_key([src], cp1)
    assert k == sources_key([src], cp1)
    assert k != sources_key([src], cp2)
    src.write_text("class A { int x; }")
    assert k != sources_key([src], cp1)


def test_the_launcher_passes_the_contender_options_to_the_jvm() -> None:
    p = contender_parser("t")
    p.add_argument("--job", required=True)
    a = p.parse_args([
        "--bootstrap", "b:1", "--input", "in", "--output", "out", "--group", "g",
        "--end-offsets", '{"1": 20, "0": 10}', "--state-dir", "/s", "--guarantee",
        "exactly-once", "--commit-interval", "0.5", "--window-ms", "100", "--job", "window",
    ])  # fmt: skip
    args = java_args(a)
    assert args[args.index("--ends") + 1] == "0=10,1=20"
    assert args[args.index("--commit-interval-ms") + 1] == "500"
    assert args[args.index("--guarantee") + 1] == "exactly-once"
    assert "--forever" not in args and "--instance-id" not in args
    app = JavaApp("/usr/bin/java", "/cp")
    assert app.argv("M", ["x"], ["-Xmx1g"]) == ["/usr/bin/java", "-Xmx1g", "-cp", "/cp", "M", "x"]
