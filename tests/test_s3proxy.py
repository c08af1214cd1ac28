"""Fast tests of the S3Proxy launcher's records and error paths (no JVM, no network).

A fake ``java`` / ``mvn`` on a private PATH stands in for the real tools, as in
``test_localbroker.py``: the launchers share their JVM process and Maven code
(``kstream.dev.jvm``, ``kstream.dev.maven``), so these check the S3 side of it.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from kstream.cli import main
from kstream.dev.jvm import pid_alive, stop_server
from kstream.dev.s3proxy import S3PROXY, S3Proxy, S3ProxyError, S3ProxyRecord

SYSTEM_PATH = "/usr/bin:/bin"


def _script(bindir: Path, name: str, body: str) -> None:
    bindir.mkdir(parents=True, exist_ok=True)
    path = bindir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _env(tmp_path: Path, server: str) -> dict[str, str]:
    """A fake Java 17 whose S3Proxy runs ``server``, and a cache holding its jars."""
    bindir = tmp_path / "bin"
    _script(
        bindir,
        "java",
        'case "$*" in\n'
        "  *-version*) echo 'openjdk version \"17.0.2\"' >&2 ;;\n"
        f"  *org.gaul.s3proxy.Main*) {server} ;;\n"
        "esac",
    )
    home = tmp_path / "cache" / "kstream" / "s3proxy-2.6.0"
    (home / "libs").mkdir(parents=True)
    (home / "libs" / "s3proxy-2.6.0.jar").write_bytes(b"")
    (home / ".complete").write_text("2.6.0\n")
    return {"PATH": f"{bindir}:{SYSTEM_PATH}", "XDG_CACHE_HOME": str(tmp_path / "cache")}


def test_record_round_trip_with_its_shell_environment(tmp_path: Path) -> None:
    rec = S3ProxyRecord("http://127.0.0.1:9", 42, "/d", "/d/s3proxy.log", "b", "ak", "sk", "2.6.0")
    rec.write(tmp_path)
    assert S3ProxyRecord.read(tmp_path) == rec
    assert (tmp_path / "env").read_text().splitlines() == [
        "export AWS_ENDPOINT_URL=http://127.0.0.1:9",
        "export AWS_ACCESS_KEY_ID=ak",
        "export AWS_SECRET_ACCESS_KEY=sk",
        "export AWS_REGION=us-east-1",
        "export AWS_ALLOW_HTTP=true",
    ]
    S3ProxyRecord.clear(tmp_path)
    assert S3ProxyRecord.read(tmp_path) is None
    assert not (tmp_path / "env").exists()


def test_no_java_says_what_needs_it_and_what_else_to_do(tmp_path: Path) -> None:
    with pytest.raises(S3ProxyError, match=r"S3Proxy 2\.6\.0 needs Java 17\+.*AWS_ENDPOINT_URL"):
        S3Proxy(tmp_path / "data", env={"PATH": str(tmp_path)}).start()


def test_no_maven_and_nothing_cached(tmp_path: Path) -> None:
    _script(tmp_path / "bin", "java", "echo 'openjdk version \"21\"' >&2")
    env = {"PATH": str(tmp_path / "bin"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    with pytest.raises(S3ProxyError, match=r"S3Proxy 2\.6\.0 is not cached in .*Install Maven"):
        S3Proxy(tmp_path / "data", env=env).start()


def test_a_server_exiting_during_startup_reports_code_and_log(tmp_path: Path) -> None:
    server = S3Proxy(tmp_path / "data", env=_env(tmp_path, "echo 'bad properties'; exit 4"))
    with pytest.raises(S3ProxyError) as info:
        server.start()
    msg = str(info.value)
    assert "S3Proxy exited with code 4 during start-up" in msg
    assert msg.endswith("bad properties")
    assert server.pid is None
    conf = (tmp_path / "data" / "s3proxy.conf").read_text()
    assert f"jclouds.filesystem.basedir={tmp_path / 'data' / 'buckets'}\n" in conf
    assert (tmp_path / "data" / "buckets" / "kstream").is_dir()


def test_a_server_not_answering_in_time_is_stopped(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    env = _env(tmp_path, f"echo $$ > {pidfile}; exec sleep 60")
    server = S3Proxy(tmp_path / "data", start_timeout=0.5, env=env)
    with pytest.raises(S3ProxyError, match=r"S3Proxy did not answer on http://127\.0\.0\.1:\d+"):
        server.start()
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)  # stopped and reaped: no orphan


def test_stopping_refuses_a_process_that_is_not_s3proxy() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(S3ProxyError, match=f"pid {proc.pid} is not the S3Proxy"):
            stop_server(S3PROXY, proc.pid, 15.0)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    assert stop_server(S3PROXY, proc.pid, 15.0) is False


def test_cli_status_and_stop_without_a_server(tmp_path: Path) -> None:
    runner = CliRunner()
    status = runner.invoke(main, ["dev", "s3", "status", "--state-dir", str(tmp_path)])
    assert (status.exit_code, status.output) == (1, "not running\n")
    stop = runner.invoke(main, ["dev", "s3", "stop", "--state-dir", str(tmp_path)])
    assert (stop.exit_code, stop.output) == (
        0,
        f"not running (no S3 server recorded in {tmp_path})\n",
    )


def test_cli_start_status_stop_of_a_detached_server(tmp_path: Path) -> None:
    """The start/status/stop plumbing every `kstream dev SERVER` group shares, end to end
    on a stand-in S3Proxy (an HTTP server on the configured port)."""
    env = _env(
        tmp_path,
        'conf=$(echo "$*" | sed "s/.*--properties //"); '
        'port=$(sed -n "s|^s3proxy.endpoint=http://127.0.0.1:||p" "$conf"); '
        'python3 -m http.server "$port" --bind 127.0.0.1',
    )
    state = ["--state-dir", str(tmp_path / "s3")]
    runner = CliRunner()
    start = runner.invoke(main, ["dev", "s3", "start", *state], env=env)
    assert start.exit_code == 0, start.output
    record = S3ProxyRecord.read(tmp_path / "s3")
    assert record is not None and start.stdout.splitlines()[0] == record.endpoint
    try:
        status = runner.invoke(main, ["dev", "s3", "status", *state], env=env)
        assert (status.exit_code, status.output) == (
            0,
            f"running at {record.endpoint} (pid {record.pid}, S3Proxy 2.6.0, bucket kstream, "
            f"log {tmp_path / 's3' / 'data' / 's3proxy.log'})\n",
        )
        again = runner.invoke(main, ["dev", "s3", "start", *state], env=env)
        assert (again.exit_code, again.stdout) == (0, f"{record.endpoint}\n")
        assert again.stderr == f"already running (pid {record.pid})\n"
    finally:
        stop = runner.invoke(main, ["dev", "s3", "stop", *state], env=env)
    assert (stop.exit_code, stop.output) == (0, f"stopped (pid {record.pid})\n")
    assert S3ProxyRecord.read(tmp_path / "s3") is None
    assert not pid_alive(record.pid)  # (a zombie until this process reaps it)
