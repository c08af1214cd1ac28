"""Java for the benchmark: jars resolved from Maven Central and classes compiled with ``javac``,
both cached under ``~/.cache/kstream`` (``$XDG_CACHE_HOME/kstream``).

Two classpaths are used:

- ``KAFKA_STREAMS``: Kafka Streams (with ``rocksdbjni``), Jackson and an slf4j binding,
  for the Kafka Streams contender compiled from ``contenders/kafkastreams/*.java``;
- ``broker_tools()``: ``kafka-tools`` at the local broker's Kafka version, for the
  broker's own ``ProducerPerformance`` / ``ConsumerPerformance`` (what
  ``kafka-producer-perf-test.sh`` / ``kafka-consumer-perf-test.sh`` run).

Resolution is ``mvn dependency:copy-dependencies`` on a throw-away pom, as the local
broker's jars are resolved (``kstream.dev.localbroker``); a marker file written after a
complete resolution makes later calls skip Maven. Compiled classes are cached by a hash
of the sources and the classpath's jar names.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kstream.dev.localbroker import KAFKA_VERSION, cache_dir, find_java

KAFKA_STREAMS_VERSION = "4.1.1"
JACKSON_VERSION = "2.19.0"  # the version kafka-clients/kafka-tools 4.1 are built with
SLF4J_VERSION = "1.7.36"  # Kafka 4.1 logs through the slf4j 1.7 API
JAVA_SOURCES = Path(__file__).resolve().parent / "contenders" / "kafkastreams"
JAVA_MAIN = "kstreambench.BenchApp"
_MARKER = ".complete"


class JvmError(RuntimeError):
    """Java, Maven or javac is missing or failed; the message says what to do."""


@dataclass(frozen=True)
class Artifact:
    """A Maven artifact ``group:artifact:version``."""

    group: str
    artifact: str
    version: str

    def __str__(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


@dataclass(frozen=True)
class JarSet:
    """A named set of Maven artifacts whose runtime closure is one classpath."""

    name: str
    artifacts: tuple[Artifact, ...]

    @property
    def key(self) -> str:
        """Cache directory name: the set's name and a hash of its coordinates."""
        coords = "\n".join(sorted(str(a) for a in self.artifacts))
        return f"{self.name}-{hashlib.sha256(coords.encode()).hexdigest()[:12]}"


KAFKA_STREAMS = JarSet(
    "bench-kafka-streams",
    (
        Artifact("org.apache.kafka", "kafka-streams", KAFKA_STREAMS_VERSION),
        Artifact("com.fasterxml.jackson.core", "jackson-databind", JACKSON_VERSION),
        Artifact("org.slf4j", "slf4j-simple", SLF4J_VERSION),
    ),
)


def broker_tools(kafka_version: str = KAFKA_VERSION) -> JarSet:
    """``kafka-tools`` of the broker's Kafka version (the perf-test classes live there)."""
    return JarSet(
        "bench-kafka-tools", (Artifact("org.apache.kafka", "kafka-tools", kafka_version),)
    )


def resolution_pom(jars: JarSet) -> str:
    """A throw-away Maven pom whose runtime dependencies are ``jars``."""
    body = "\n".join(
        f"    <dependency><groupId>{a.group}</groupId><artifactId>{a.artifact}</artifactId>"
        f"<version>{a.version}</version></dependency>"
        for a in jars.artifacts
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        f"  <groupId>kstream.local</groupId><artifactId>{jars.name}</artifactId>"
        "<version>1</version>\n"
        f"  <dependencies>\n{body}\n  </dependencies>\n</project>\n"
    )


def classpath(*dirs: Path) -> str:
    """Every ``*.jar`` in the ``dirs`` (sorted by name) and the dirs themselves that hold
    ``.class`` trees, joined with the platform's path separator."""
    parts: list[str] = []
    for d in dirs:
        jars = sorted(d.glob("*.jar"))
        parts += [str(j) for j in jars] if jars else [str(d)]
    return os.pathsep.join(parts)


def resolve(jars: JarSet, env: Mapping[str, str] | None = None) -> Path:
    """A directory holding the runtime closure of ``jars``; resolved once with ``mvn``."""
    env = os.environ if env is None else env
    home = cache_dir(env) / jars.key
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
            raise JvmError(f"{jars.name} is not cached in {home} and Maven ('mvn') is not on PATH")
        shutil.rmtree(libs, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="kstream-mvn-") as work:
            (Path(work) / "pom.xml").write_text(resolution_pom(jars))
            proc = subprocess.run(
                [mvn, "-q", "-B", "dependency:copy-dependencies", "-DincludeScope=runtime",
                 f"-DoutputDirectory={libs}"],
                cwd=work, capture_output=True, text=True, env=dict(env), check=False,
            )  # fmt: skip
        if proc.returncode != 0 or not any(libs.glob("*.jar")):
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
            raise JvmError(
                f"resolving {', '.join(map(str, jars.artifacts))} from Maven Central failed "
                f"(exit {proc.returncode}):\n{tail}"
            )
        (home / _MARKER).write_text("\n".join(map(str, jars.artifacts)) + "\n")
    return libs


def sources_key(sources: Sequence[Path], cp: str) -> str:
    """Cache key of a compilation: the sources' names and contents and the classpath's jar
    names (a new dependency version recompiles)."""
    h = hashlib.sha256()
    for src in sorted(sources):
        h.update(src.name.encode() + b"\0" + src.read_bytes() + b"\0")
    for entry in cp.split(os.pathsep):
        h.update(Path(entry).name.encode() + b"\0")
    return h.hexdigest()[:16]


def compile_classes(
    sources: Sequence[Path], cp: str, env: Mapping[str, str] | None = None
) -> Path:
    """Compile ``sources`` against ``cp`` with ``javac`` once; the cached class directory."""
    env = os.environ if env is None else env
    out = cache_dir(env) / "bench-classes" / sources_key(sources, cp)
    if (out / _MARKER).is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    with open(out.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (out / _MARKER).is_file():
            return out
        java, _ = find_java(env)
        javac = Path(java).resolve().parent / "javac"
        if not javac.exists():
            found = shutil.which("javac", path=env.get("PATH", ""))
            if found is None:
                raise JvmError("no javac next to java nor on PATH: install a JDK 17+")
            javac = Path(found)
        proc = subprocess.run(
            [str(javac), "-nowarn", "-encoding", "UTF-8", "--release", "17", "-cp", cp,
             "-d", str(out), *map(str, sources)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise JvmError(f"javac failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        (out / _MARKER).write_text("ok\n")
    return out


@dataclass(frozen=True)
class JavaApp:
    """A ``java`` command line prefix: the runtime, JVM options and the classpath."""

    java: str
    cp: str

    def argv(self, main_class: str, args: Sequence[str], jvm_opts: Sequence[str] = ()) -> list[str]:
        return [self.java, *jvm_opts, "-cp", self.cp, main_class, *args]


def kafka_streams_app(env: Mapping[str, str] | None = None) -> JavaApp:
    """The Kafka Streams contender, compiled (once) against its resolved classpath."""
    libs = resolve(KAFKA_STREAMS, env)
    cp = classpath(libs)
    classes = compile_classes(sorted(JAVA_SOURCES.glob("*.java")), cp, env)
    java, _ = find_java(env)
    return JavaApp(java, os.pathsep.join([str(classes), cp]))


def broker_tools_app(env: Mapping[str, str] | None = None) -> JavaApp:
    """``kafka-tools`` of the broker's version: ``ProducerPerformance``, ``ConsumerPerformance``."""
    java, _ = find_java(env)
    return JavaApp(java, classpath(resolve(broker_tools(), env)))
