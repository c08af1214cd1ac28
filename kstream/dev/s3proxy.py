"""A real S3-compatible server on this machine (S3Proxy, file-system backend), for demos and tests.

S3Proxy (``org.gaul:s3proxy`` on Maven Central) serves the S3 REST API over a
jclouds blob store; with ``jclouds.provider=filesystem-nio2`` a bucket is a
directory under the data directory's ``buckets/`` (the older ``filesystem``
provider is deprecated and 5-10x slower per request: it hashes a file on every
HEAD). Needs Java 17+; the jars are resolved once from Maven Central and cached
under ``$XDG_CACHE_HOME/kstream/s3proxy-<version>`` (:mod:`kstream.dev.maven`).

Lifecycle as every development server's (:class:`kstream.dev.server.DevServer`):
:meth:`S3Proxy.start` writes the configuration, creates the buckets, starts the JVM
and returns once the server answers HTTP; :meth:`S3Proxy.stop` sends SIGTERM,
waits, then SIGKILL. A detached server
(``kstream dev s3 start``) is found again through :class:`S3ProxyRecord`. Every
failure is an :class:`S3ProxyError` saying what to do.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Unpack

from kstream.dev.jvm import DevServerError, ServerKind, jvm_options, render_properties
from kstream.dev.maven import Jars, resolve
from kstream.dev.server import DevServer, ServerOptions, ServerRecord

S3PROXY_VERSION = "2.6.0"
MAIN_CLASS = "org.gaul.s3proxy.Main"
DEFAULT_BUCKET = "kstream"
# Fixed development credentials: the server listens on loopback (or a test's own
# network namespace bridge) and holds throw-away data.
DEV_ACCESS_KEY = "kstream-dev"
DEV_SECRET_KEY = "kstream-dev-secret"
LOGBACK_XML = """<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level %logger{36} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="OUT"/></root>
  <logger name="org.gaul.s3proxy.Main" level="INFO"/>
</configuration>
"""


class S3ProxyError(DevServerError):
    """The local S3 server could not be obtained, started or stopped; the message says why."""


S3PROXY = ServerKind(
    name="S3Proxy",
    main_class=MAIN_CLASS,
    error=S3ProxyError,
    needs=f"S3Proxy {S3PROXY_VERSION}",
    alternative="point --store at an existing S3-compatible service (AWS_ENDPOINT_URL)",
    stop_command="kstream dev s3 stop",
)


def s3proxy_jars(version: str = S3PROXY_VERSION) -> Jars:
    """S3Proxy's complete classpath on Maven Central."""
    return Jars(
        name="s3proxy",
        version=version,
        dependencies=(("org.gaul", "s3proxy", version),),
        proof="s3proxy-*.jar",
        what=f"S3Proxy {version}",
        alternative=S3PROXY.alternative,
    )


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


@dataclass(frozen=True)
class S3ProxyRecord(ServerRecord):
    """What a running server leaves in its state directory so other commands find it:
    ``s3proxy.json`` and an ``env`` file of ``export`` lines (for shells)."""

    endpoint: str
    pid: int
    data_dir: str
    log_file: str
    bucket: str
    access_key: str
    secret_key: str
    version: str

    KIND: ClassVar[ServerKind] = S3PROXY
    FILE: ClassVar[str] = "s3proxy.json"
    ENV_FILE: ClassVar[str] = "env"
    COMPANIONS: ClassVar[tuple[str, ...]] = (ENV_FILE,)

    @property
    def pids(self) -> tuple[int, ...]:
        return (self.pid,)

    @property
    def address(self) -> str:
        return self.endpoint

    def describe(self) -> str:
        return f"S3Proxy {self.version}, bucket {self.bucket}, log {self.log_file}"

    def environment(self) -> dict[str, str]:
        """The standard S3 client environment that reaches this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    def companion_texts(self) -> dict[str, str]:
        lines = [f"export {k}={v}" for k, v in self.environment().items()]
        return {self.ENV_FILE: "\n".join(lines) + "\n"}


class S3Proxy(DevServer):
    """One S3Proxy process serving the buckets under ``data_dir/buckets``.

    ``port=0`` picks a free port. ``detach=True`` keeps it running after this
    Python process exits. Stopping and starting again on the same port keeps the
    data (what a test simulating a store outage does).
    """

    KIND: ClassVar[ServerKind] = S3PROXY

    def __init__(
        self,
        data_dir: Path | str,
        *,
        buckets: tuple[str, ...] = (DEFAULT_BUCKET,),
        access_key: str = DEV_ACCESS_KEY,
        secret_key: str = DEV_SECRET_KEY,
        **options: Unpack[ServerOptions],
    ) -> None:
        super().__init__(data_dir, **options)
        self.buckets = buckets
        self.access_key = access_key
        self.secret_key = secret_key

    @property
    def endpoint(self) -> str:
        """The URL S3 clients use (``AWS_ENDPOINT_URL``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def address(self) -> str:
        return self.endpoint

    @property
    def log_files(self) -> tuple[Path, ...]:
        """The JVM's output (S3Proxy logs to stdout)."""
        return (self.data_dir / "s3proxy.log",)

    def bucket_dir(self, bucket: str = DEFAULT_BUCKET) -> Path:
        """The directory holding ``bucket``'s objects."""
        return self.data_dir / "buckets" / bucket

    def environment(self) -> dict[str, str]:
        """The standard S3 client environment that reaches this server."""
        return self.record().environment()

    def record(self) -> S3ProxyRecord:
        """An :class:`S3ProxyRecord` describing this running server."""
        if self.pid is None:
            raise S3ProxyError("S3Proxy is not started")
        return S3ProxyRecord(
            endpoint=self.endpoint,
            pid=self.pid,
            data_dir=str(self.data_dir),
            log_file=str(self.log_file),
            bucket=self.buckets[0] if self.buckets else "",
            access_key=self.access_key,
            secret_key=self.secret_key,
            version=S3PROXY_VERSION,
        )

    def command(self, java: str) -> list[str]:
        """Get the jars, check the port, write the configuration, create the bucket
        directories: S3Proxy's command line."""
        libs = resolve(s3proxy_jars(), self._env, error=S3ProxyError)
        self.claim_port("S3Proxy")
        buckets_dir = self.data_dir / "buckets"
        for bucket in self.buckets:
            (buckets_dir / bucket).mkdir(parents=True, exist_ok=True)
        conf = self.data_dir / "s3proxy.conf"
        props = s3proxy_properties(
            buckets_dir, self.host, self.port, self.access_key, self.secret_key
        )
        conf.write_text(render_properties(props))
        # S3Proxy ships no logging configuration: logback's default logs every request
        # at DEBUG (hundreds of MB, and a much slower server).
        logback = self.data_dir / "logback.xml"
        logback.write_text(LOGBACK_XML)
        return [
            java,
            *jvm_options(self.heap),
            f"-Dlogback.configurationFile={logback}",
            "-cp",
            f"{libs}/*",
            MAIN_CLASS,
            "--properties",
            str(conf),
        ]

    def ready(self) -> bool:
        return answers(self.endpoint)


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
