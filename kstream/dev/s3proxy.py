"""A real S3-compatible server on this machine (S3Proxy, file-system backend), for demos and tests.

S3Proxy (``org.gaul:s3proxy`` on Maven Central) serves the S3 REST API over a
jclouds blob store; with ``jclouds.provider=filesystem-nio2`` a bucket is a
directory under the data directory's ``buckets/`` (the older ``filesystem``
provider is deprecated and 5-10x slower per request: it hashes a file on every HEAD). Needs Java 17+; the jars are resolved
once with ``mvn`` and cached under ``$XDG_CACHE_HOME/kstream/s3proxy-<version>``.

Lifecycle as :class:`kstream.dev.localbroker.LocalBroker`: :meth:`S3Proxy.start`
writes the configuration, creates the buckets, starts the JVM in its own process
group and returns once the server answers HTTP; :meth:`S3Proxy.stop` sends
SIGTERM, waits, then SIGKILL. An attached server dies with its Python parent; a
detached one (``kstream dev s3 start``) is found again through
:class:`S3ProxyRecord`. Every failure is an :class:`S3ProxyError` saying what to do.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from kstream.dev.localbroker import (
    _check_port_free,
    _die_with_parent,
    _pid_alive,
    _signal_group,
    _tail,
    cache_dir,
    find_java,
    free_port,
)

S3PROXY_VERSION = "2.6.0"
MAIN_CLASS = "org.gaul.s3proxy.Main"
DEFAULT_BUCKET = "kstream"
# Fixed development credentials: the server listens on loopback (or a test's own
# network namespace bridge) and holds throw-away data.
DEV_ACCESS_KEY = "kstream-dev"
DEV_SECRET_KEY = "kstream-dev-secret"
_MARKER = ".complete"
LOGBACK_XML = """<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level %logger{36} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="OUT"/></root>
  <logger name="org.gaul.s3proxy.Main" level="INFO"/>
</configuration>
"""


class S3ProxyError(RuntimeError):
    """The local S3 server could not be obtained, started or stopped; the message says why."""


def resolution_pom(version: str = S3PROXY_VERSION) -> str:
    """A throw-away Maven pom whose runtime dependencies are S3Proxy's complete classpath."""
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>kstream.local</groupId><artifactId>s3proxy-server</artifactId>"
        "<version>1</version>\n"
        "  <dependencies>\n"
        f"    <dependency><groupId>org.gaul</groupId><artifactId>s3proxy</artifactId>"
        f"<version>{version}</version></dependency>\n"
        "  </dependencies>\n</project>\n"
    )


def resolve_jars(env: Mapping[str, str] | None = None, version: str = S3PROXY_VERSION) -> Path:
    """A directory of jars that runs S3Proxy; downloads once with ``mvn``, then reuses the cache."""
    env = os.environ if env is None else env
    home = cache_dir(env) / f"s3proxy-{version}"
    libs = home / "libs"
    if (home / _MARKER).is_file():
        return libs
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be resolving right now
        if (home / _MARKER).is_file():
            return libs
        mvn = shutil.which("mvn", path=env.get("PATH", ""))
        if mvn is None:
            raise S3ProxyError(
                f"S3Proxy {version} is not cached in {home} and Maven ('mvn') is not on PATH "
                f"to download it. Install Maven, or point --store at an existing S3-compatible "
                f"service (AWS_ENDPOINT_URL)."
            )
        shutil.rmtree(libs, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="kstream-mvn-") as work:
            (Path(work) / "pom.xml").write_text(resolution_pom(version))
            cmd = [
                mvn,
                "-q",
                "-B",
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={libs}",
            ]
            proc = subprocess.run(
                cmd, cwd=work, capture_output=True, text=True, env=dict(env), check=False
            )
        if proc.returncode != 0 or not any(libs.glob("s3proxy-*.jar")):
            raise S3ProxyError(
                f"resolving S3Proxy {version} from Maven Central failed (exit "
                f"{proc.returncode}; needs access to Maven Central). Last lines of mvn's "
                f"output:\n{_tail(proc.stdout + proc.stderr)}"
            )
        (home / _MARKER).write_text(f"{version}\n")
    return libs


def s3proxy_properties(
    buckets_dir: Path, host: str, port: int, access_key: str, secret_key: str
) -> dict[str, str]:
    """S3Proxy's configuration: file-system (nio2) backend, SigV2/V4 auth with the given keys.

    ``ignore-unknown-headers``: S3 clients send headers this backend does not
    implement (e.g. ``x-amz-checksum-*`` on bulk deletes); S3Proxy otherwise
    answers 501 to them.
    """
    return {
        "s3proxy.endpoint": f"http://{host}:{port}",
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": access_key,
        "s3proxy.credential": secret_key,
        "s3proxy.ignore-unknown-headers": "true",
        "jclouds.provider": "filesystem-nio2",
        "jclouds.identity": access_key,  # required by this provider, unused by it
        "jclouds.credential": secret_key,
        "jclouds.filesystem.basedir": str(buckets_dir),
    }


def _is_s3proxy_process(pid: int) -> bool:
    """Whether ``pid`` is an S3Proxy JVM (guards against signalling a recycled pid)."""
    with contextlib.suppress(OSError):
        return MAIN_CLASS.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    return False


def stop_pid(pid: int, timeout: float = 15.0) -> bool:
    """Stop the S3Proxy JVM ``pid`` and its process group; False if none was running."""
    if not _pid_alive(pid):
        return False
    if not _is_s3proxy_process(pid):
        raise S3ProxyError(f"pid {pid} is not an S3Proxy server; not stopping it")
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _pid_alive(pid):
        if time.monotonic() > deadline:
            _signal_group(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5.0
        time.sleep(0.05)
    return True


@dataclass(frozen=True)
class S3ProxyRecord:
    """What a running server leaves in its state directory so other commands find it."""

    endpoint: str
    pid: int
    data_dir: str
    log_file: str
    bucket: str
    access_key: str
    secret_key: str
    version: str

    FILE = "s3proxy.json"
    ENV_FILE = "env"

    def environment(self) -> dict[str, str]:
        """The standard S3 client environment that reaches this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    def write(self, state_dir: Path) -> None:
        """Write ``s3proxy.json`` and an ``env`` file of ``export`` lines (for shells)."""
        state_dir.mkdir(parents=True, exist_ok=True)
        tmp = state_dir / (self.FILE + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(state_dir / self.FILE)
        lines = [f"export {k}={v}" for k, v in self.environment().items()]
        (state_dir / self.ENV_FILE).write_text("\n".join(lines) + "\n")

    @classmethod
    def read(cls, state_dir: Path) -> S3ProxyRecord | None:
        """The record in ``state_dir``, or None if there is none."""
        path = state_dir / cls.FILE
        if not path.is_file():
            return None
        return cls(**json.loads(path.read_text()))

    @classmethod
    def clear(cls, state_dir: Path) -> None:
        """Remove the record (the server is gone)."""
        for name in (cls.FILE, cls.ENV_FILE):
            (state_dir / name).unlink(missing_ok=True)

    def is_running(self) -> bool:
        """Whether the recorded pid is still a live S3Proxy JVM."""
        return _pid_alive(self.pid) and _is_s3proxy_process(self.pid)


class S3Proxy:
    """One S3Proxy process serving the buckets under ``data_dir/buckets``.

    ``port=0`` picks a free port. ``detach=True`` keeps it running after this
    Python process exits. Stopping and starting again on the same port keeps the
    data (what a test simulating a store outage does).
    """

    def __init__(
        self,
        data_dir: Path | str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        buckets: tuple[str, ...] = (DEFAULT_BUCKET,),
        access_key: str = DEV_ACCESS_KEY,
        secret_key: str = DEV_SECRET_KEY,
        heap: str = "256m",
        start_timeout: float = 60.0,
        detach: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port = port
        self.buckets = buckets
        self.access_key = access_key
        self.secret_key = secret_key
        self.heap = heap
        self.start_timeout = start_timeout
        self.detach = detach
        self._env = dict(os.environ if env is None else env)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """The URL S3 clients use (``AWS_ENDPOINT_URL``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        """The JVM's output (S3Proxy logs to stdout)."""
        return self.data_dir / "s3proxy.log"

    @property
    def pid(self) -> int | None:
        """The JVM's pid while started."""
        return self._proc.pid if self._proc is not None else None

    def bucket_dir(self, bucket: str = DEFAULT_BUCKET) -> Path:
        """The directory holding ``bucket``'s objects."""
        return self.data_dir / "buckets" / bucket

    def environment(self) -> dict[str, str]:
        """The standard S3 client environment that reaches this server."""
        return self.record().environment()

    def record(self) -> S3ProxyRecord:
        """An :class:`S3ProxyRecord` describing this running server."""
        if self._proc is None:
            raise S3ProxyError("S3Proxy is not started")
        return S3ProxyRecord(
            endpoint=self.endpoint,
            pid=self._proc.pid,
            data_dir=str(self.data_dir),
            log_file=str(self.log_file),
            bucket=self.buckets[0] if self.buckets else "",
            access_key=self.access_key,
            secret_key=self.secret_key,
            version=S3PROXY_VERSION,
        )

    def __enter__(self) -> S3Proxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        """Start the server; its endpoint once it answers HTTP.

        Steps: check Java, get the jars, check the port, write the configuration,
        create the bucket directories, start the JVM, wait until it answers.
        """
        if self._proc is not None:
            raise S3ProxyError(f"S3Proxy already started (pid {self._proc.pid})")
        try:
            java, _ = find_java(self._env)
        except RuntimeError as e:
            raise S3ProxyError(f"S3Proxy needs Java 17+: {e}") from e
        libs = resolve_jars(self._env)
        if self.port == 0:
            self.port = free_port(self.host)
        try:
            _check_port_free(self.host, self.port, "S3Proxy")
        except RuntimeError as e:
            raise S3ProxyError(str(e)) from e
        buckets_dir = self.data_dir / "buckets"
        for bucket in self.buckets:
            (buckets_dir / bucket).mkdir(parents=True, exist_ok=True)
        conf = self.data_dir / "s3proxy.conf"
        props = s3proxy_properties(
            buckets_dir, self.host, self.port, self.access_key, self.secret_key
        )
        conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        # S3Proxy ships no logging configuration: logback's default logs every request
        # at DEBUG (hundreds of MB, and a much slower server).
        logback = self.data_dir / "logback.xml"
        logback.write_text(LOGBACK_XML)
        cmd = [
            java,
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:+ExitOnOutOfMemoryError",
            f"-Dlogback.configurationFile={logback}",
            "-cp",
            f"{libs}/*",
            MAIN_CLASS,
            "--properties",
            str(conf),
        ]
        with open(self.log_file, "ab") as out:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                env=self._env,
                start_new_session=True,  # own process group: stop() signals the whole tree
                preexec_fn=None if self.detach else _die_with_parent,
            )
        if not self.detach:
            atexit.register(self.stop)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self.endpoint

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                raise S3ProxyError(
                    f"S3Proxy exited with code {code} during start-up. Log: {self.log_file}\n"
                    f"{self._log_tail()}"
                )
            if answers(self.endpoint):
                return
            if time.monotonic() > deadline:
                raise S3ProxyError(
                    f"S3Proxy did not answer on {self.endpoint} within {self.start_timeout:g}s. "
                    f"Log: {self.log_file}\n{self._log_tail()}"
                )
            time.sleep(0.1)

    def _log_tail(self, lines: int = 25) -> str:
        if self.log_file.is_file() and self.log_file.stat().st_size:
            return _tail(self.log_file.read_text(errors="replace"), lines)
        return "(no log output)"

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``); idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ValueError):
            atexit.unregister(self.stop)
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def wait(self) -> int:
        """Block until the server exits; its exit code."""
        if self._proc is None:
            raise S3ProxyError("S3Proxy is not started")
        return self._proc.wait()


def answers(endpoint: str, timeout: float = 1.0) -> bool:
    """Whether an HTTP server answers at ``endpoint`` (any status: S3 refuses anonymous GETs)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    try:
        with opener.open(endpoint + "/", timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True  # 403 AccessDenied: it is up
    except (urllib.error.URLError, OSError):
        return False
