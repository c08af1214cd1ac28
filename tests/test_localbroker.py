"""Fast tests of the local broker's configuration and error paths (no JVM, no network).

A fake ``java`` / ``mvn`` (small shell scripts on a private PATH) stands in for
the real tools, so each failure mode is reproduced exactly.
"""

from __future__ import annotations

import base64
import os
import socket
import stat
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kstream.dev.jvm import find_java, render_properties, stop_server
from kstream.dev.localbroker import (
    KAFKA,
    BrokerRecord,
    LocalBroker,
    LocalBrokerError,
    broker_properties,
    kafka_jars,
    kafka_version_of,
    log4j2_properties,
    new_cluster_id,
    previous_ports,
    resolve_libs,
)
from kstream.dev.maven import resolution_pom

SYSTEM_PATH = "/usr/bin:/bin"  # sh utilities for the fake tools; fakes come first
JAVA17 = """*-version*) echo 'openjdk version "17.0.2" 2022-01-18' >&2 ;;"""


def _script(bindir: Path, name: str, body: str) -> Path:
    bindir.mkdir(parents=True, exist_ok=True)
    path = bindir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _fake_java(bindir: Path, kafka: str = "exit 0", storage: str = "echo formatted") -> None:
    _script(
        bindir,
        "java",
        f'case "$*" in\n  {JAVA17}\n  *StorageTool*) {storage} ;;\n  *kafka.Kafka*) {kafka} ;;\nesac',
    )


def _cached_env(tmp_path: Path, bindir: Path) -> dict[str, str]:
    """An environment whose cache already holds a (fake) complete Kafka resolution."""
    home = tmp_path / "cache" / "kstream" / "kafka-4.1.1"
    (home / "libs").mkdir(parents=True)
    (home / "libs" / "kafka_2.13-4.1.1.jar").write_bytes(b"")
    (home / ".complete").write_text("4.1.1\n")
    return {
        "PATH": f"{bindir}:{SYSTEM_PATH}",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "HOME": str(tmp_path),
    }


# ------------------------------------------------------------------ configuration


def test_broker_properties_single_node_kraft_on_loopback(tmp_path: Path) -> None:
    props = broker_properties(tmp_path, 9192, 9193)
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9193"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9192,CONTROLLER://127.0.0.1:9193"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9192"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert props["log.dirs"] == str(tmp_path / "logs")
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
    ):
        assert props[key] == "1", key
    assert props["group.initial.rebalance.delay.ms"] == "0"


def test_render_properties_is_key_equals_value_lines() -> None:
    assert render_properties({"a.b": "1", "c": "x:y"}) == "a.b=1\nc=x:y\n"


def test_log4j2_config_writes_to_the_given_file(tmp_path: Path) -> None:
    text = log4j2_properties(tmp_path / "broker.log")
    assert f"appender.file.fileName = {tmp_path / 'broker.log'}\n" in text
    assert "rootLogger.appenderRef.file.ref = FILE\n" in text


def test_resolution_pom_names_kafka_and_the_slf4j_binding() -> None:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.fromstring(resolution_pom(kafka_jars("4.1.1")))
    deps = [
        tuple(d.find(f"m:{f}", ns).text for f in ("groupId", "artifactId", "version"))  # type: ignore[union-attr]
        for d in root.iterfind("m:dependencies/m:dependency", ns)
    ]
    assert deps == [
        ("org.apache.kafka", "kafka_2.13", "4.1.1"),
        ("org.apache.logging.log4j", "log4j-slf4j-impl", "2.24.3"),
    ]


def test_cluster_id_is_22_char_base64url_of_16_bytes() -> None:
    ids = {new_cluster_id() for _ in range(20)}
    assert len(ids) == 20
    for cid in ids:
        assert len(cid) == 22
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_kafka_version_is_read_from_the_broker_jar(tmp_path: Path) -> None:
    for name in ("kafka-clients-4.1.1.jar", "kafka_2.13-4.1.1-sources.jar", "kafka_2.13-4.1.1.jar"):
        (tmp_path / name).write_bytes(b"")
    assert kafka_version_of(tmp_path) == "4.1.1"
    with pytest.raises(LocalBrokerError, match=r"no kafka_<scala>-<version>\.jar"):
        kafka_version_of(tmp_path / "empty")


def test_broker_record_round_trip(tmp_path: Path) -> None:
    rec = BrokerRecord("127.0.0.1:1234", 42, "/d", "/d/broker.log", "4.1.1")
    rec.write(tmp_path)
    assert BrokerRecord.read(tmp_path) == rec
    assert (tmp_path / "bootstrap").read_text() == "127.0.0.1:1234\n"
    BrokerRecord.clear(tmp_path)
    assert BrokerRecord.read(tmp_path) is None
    assert not (tmp_path / "bootstrap").exists()


# ------------------------------------------------------------------ java


def test_no_java_on_path(tmp_path: Path) -> None:
    with pytest.raises(LocalBrokerError, match=r"no Java runtime found.*Java 17\+"):
        find_java(KAFKA, {"PATH": str(tmp_path)})


def test_java_8_is_rejected(tmp_path: Path) -> None:
    _script(tmp_path, "java", """echo 'java version "1.8.0_392"' >&2""")
    with pytest.raises(LocalBrokerError, match=r"is Java 8; Kafka 4.1.1 needs Java 17\+"):
        find_java(KAFKA, {"PATH": str(tmp_path)})


def test_java_home_wins_over_path(tmp_path: Path) -> None:
    _script(tmp_path / "path", "java", """echo 'openjdk version "11.0.2"' >&2""")
    jh = _script(tmp_path / "jdk" / "bin", "java", """echo 'openjdk version "21.0.1"' >&2""")
    env = {"PATH": str(tmp_path / "path"), "JAVA_HOME": str(tmp_path / "jdk")}
    assert find_java(KAFKA, env) == (str(jh), 21)


# ------------------------------------------------------------------ jars


def test_kafka_home_libs_are_used_as_is(tmp_path: Path) -> None:
    (tmp_path / "kafka" / "libs").mkdir(parents=True)
    (tmp_path / "kafka" / "libs" / "kafka_2.13-3.9.0.jar").write_bytes(b"")
    assert resolve_libs({"KAFKA_HOME": str(tmp_path / "kafka"), "PATH": ""}) == (
        tmp_path / "kafka" / "libs"
    )
    with pytest.raises(LocalBrokerError, match="has no libs/ directory"):
        resolve_libs({"KAFKA_HOME": str(tmp_path / "nowhere"), "PATH": ""})


def test_no_maven_and_nothing_cached(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path / "bin"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    with pytest.raises(LocalBrokerError, match=r"Maven \('mvn'\) is not on PATH.*KAFKA_HOME"):
        resolve_libs(env)


def test_failed_resolution_shows_mvn_output_tail_and_writes_no_marker(tmp_path: Path) -> None:
    _script(
        tmp_path / "bin",
        "mvn",
        "for i in $(seq 1 50); do echo line-$i; done; echo 'Could not resolve kafka_2.13'; exit 1",
    )
    env = {"PATH": f"{tmp_path / 'bin'}:{SYSTEM_PATH}", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    with pytest.raises(LocalBrokerError) as info:
        resolve_libs(env)
    msg = str(info.value)
    assert "resolving Kafka 4.1.1 from Maven Central failed (exit 1" in msg
    assert msg.endswith("line-50\nCould not resolve kafka_2.13")
    assert "line-20\n" not in msg  # only the tail
    assert not (tmp_path / "cache" / "kstream" / "kafka-4.1.1" / ".complete").exists()


def test_resolution_runs_mvn_once_then_uses_the_cache(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    _script(
        tmp_path / "bin",
        "mvn",
        f'echo "$*" >> {calls}\n'
        'for a in "$@"; do case "$a" in -DoutputDirectory=*) d="${a#-DoutputDirectory=}";; esac; done\n'
        'mkdir -p "$d" && touch "$d/kafka_2.13-4.1.1.jar" "$d/log4j-slf4j-impl-2.24.3.jar"',
    )
    env = {"PATH": f"{tmp_path / 'bin'}:{SYSTEM_PATH}", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    libs = resolve_libs(env)
    assert libs == tmp_path / "cache" / "kstream" / "kafka-4.1.1" / "libs"
    assert sorted(p.name for p in libs.iterdir()) == [
        "kafka_2.13-4.1.1.jar",
        "log4j-slf4j-impl-2.24.3.jar",
    ]
    assert resolve_libs(env) == libs
    assert calls.read_text() == (
        f"-q -B dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory={libs}\n"
    )


# ------------------------------------------------------------------ start-up failures


def test_busy_port_is_reported_before_starting_java(tmp_path: Path) -> None:
    _fake_java(tmp_path / "bin", kafka="echo must-not-run; exit 9")
    env = _cached_env(tmp_path, tmp_path / "bin")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        broker = LocalBroker(tmp_path / "data", port=port, env=env)
        with pytest.raises(
            LocalBrokerError, match=rf"broker port 127.0.0.1:{port} is already in use"
        ):
            broker.start()
    assert not (tmp_path / "data" / "broker.out").exists()


def test_broker_exiting_during_startup_reports_code_and_log(tmp_path: Path) -> None:
    _fake_java(tmp_path / "bin", kafka="echo 'ERROR bad listener config'; exit 3")
    broker = LocalBroker(tmp_path / "data", env=_cached_env(tmp_path, tmp_path / "bin"))
    with pytest.raises(LocalBrokerError) as info:
        broker.start()
    msg = str(info.value)
    assert "Kafka broker exited with code 3 during start-up" in msg
    assert f"Log: {tmp_path / 'data' / 'broker.log'}" in msg
    assert "--- broker.out ---\nERROR bad listener config" in msg
    assert broker.pid is None


def test_broker_not_answering_in_time_is_killed_and_reported(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    _fake_java(tmp_path / "bin", kafka=f"echo $$ > {pidfile}; echo starting; exec sleep 60")
    broker = LocalBroker(
        tmp_path / "data", start_timeout=0.5, env=_cached_env(tmp_path, tmp_path / "bin")
    )
    with pytest.raises(LocalBrokerError, match=r"did not answer on 127\.0\.0\.1:\d+ within 0\.5s"):
        broker.start()
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped and reaped: no orphan


def test_storage_format_failure_is_reported(tmp_path: Path) -> None:
    _fake_java(tmp_path / "bin", storage="echo 'Invalid cluster.id'; exit 1")
    broker = LocalBroker(tmp_path / "data", env=_cached_env(tmp_path, tmp_path / "bin"))
    with pytest.raises(LocalBrokerError, match=r"formatting Kafka storage.*\(exit 1\):\nInvalid"):
        broker.start()


def test_stopping_refuses_a_process_that_is_not_kafka() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(LocalBrokerError, match=f"pid {proc.pid} is not the Kafka broker"):
            stop_server(KAFKA, proc.pid, 20.0)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    assert stop_server(KAFKA, proc.pid, 20.0) is False


# ------------------------------------------------------------------ CLI without a broker


def test_cli_status_and_stop_without_a_broker(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kstream.cli import main

    runner = CliRunner()
    status = runner.invoke(main, ["dev", "kafka", "status", "--state-dir", str(tmp_path)])
    assert (status.exit_code, status.output) == (1, "not running\n")
    stop = runner.invoke(main, ["dev", "kafka", "stop", "--state-dir", str(tmp_path)])
    assert (stop.exit_code, stop.output) == (0, f"not running (no broker recorded in {tmp_path})\n")


def test_cli_topic_tools_need_a_bootstrap(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kstream.cli import main

    result = CliRunner().invoke(
        main,
        ["dev", "topics", "create", "t", "--state-dir", str(tmp_path)],
        env={"KSTREAM_BOOTSTRAP": None},
    )
    assert result.exit_code == 2
    assert (
        "no bootstrap servers: give --bootstrap HOST:PORT (or set KSTREAM_BOOTSTRAP)"
        in result.output
    )
    assert f"(no local broker runs in {tmp_path})" in result.output


def test_cluster_ids_never_look_like_an_option() -> None:
    from kstream.dev.localbroker import new_cluster_id

    ids = [new_cluster_id() for _ in range(3000)]  # ~47 would start with "-" otherwise
    assert not any(i.startswith("-") for i in ids)
    assert all(len(i) == 22 for i in ids)


def test_a_restart_on_the_same_data_keeps_its_ports(tmp_path: Path) -> None:
    """`kstream dev kafka stop` then `start` picked new ports, breaking scripts that
    saved the bootstrap (issue 37); a given port still wins."""
    _fake_java(tmp_path / "bin", kafka="exit 3")
    env = _cached_env(tmp_path, tmp_path / "bin")
    first = LocalBroker(tmp_path / "data", env=env)
    with pytest.raises(LocalBrokerError, match="exited with code 3"):
        first.start()
    again = LocalBroker(tmp_path / "data", env=env)
    with pytest.raises(LocalBrokerError, match="exited with code 3"):
        again.start()
    assert (again.port, again.controller_port) == (first.port, first.controller_port)
    assert previous_ports(tmp_path / "data" / "server.properties") == (
        first.port,
        first.controller_port,
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        given = s.getsockname()[1]
    chosen = LocalBroker(tmp_path / "data", port=given, env=env)
    with pytest.raises(LocalBrokerError, match="exited with code 3"):
        chosen.start()
    assert (chosen.port, chosen.controller_port) == (given, first.controller_port)


def test_a_kept_port_in_use_is_refused_saying_why(tmp_path: Path) -> None:
    _fake_java(tmp_path / "bin", kafka="echo must-not-run; exit 9")
    env = _cached_env(tmp_path, tmp_path / "bin")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "server.properties").write_text(
            render_properties(broker_properties(tmp_path / "data", port, port + 1))
        )
        with pytest.raises(LocalBrokerError) as info:
            LocalBroker(tmp_path / "data", env=env).start()
    assert str(info.value).startswith(f"broker port 127.0.0.1:{port} is already in use")
    assert str(info.value).endswith(
        "(the port this data directory's broker had before, kept so a saved bootstrap stays "
        "valid; free it, or give --port/--controller-port)"
    )
