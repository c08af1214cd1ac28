"""Java for the benchmark: jars resolved from Maven Central and classes compiled with ``javac``,
both cached under ``~/.cache/kstream`` (``$XDG_CACHE_HOME/kstream``).

Two classpaths are used:

- ``KAFKA_STREAMS``: Kafka Streams (with ``rocksdbjni``), Jackson and an slf4j binding,
  for the Kafka Streams contender compiled from ``contenders/kafkastreams/*.java``;
- ``broker_tools()``: ``kafka-tools`` at the local broker's Kafka version, for the
  broker's own ``ProducerPerformance`` / ``ConsumerPerformance`` (what
  ``kafka-producer-perf-test.sh`` / ``kafka-consumer-perf-test.sh`` run).

Resolution is ``kstream.dev.maven`` (the local broker's and S3Proxy's): a throw-away
pom, ``mvn dependency:copy-dependencies`` once, a marker file after a complete
resolution. Compiled classes are cached by a hash of the sources and the classpath's
jar names.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kstream.dev import maven
from kstream.dev.jvm import DevServerError, ServerKind, find_java
from kstream.dev.localbroker import KAFKA_VERSION
from kstream.dev.maven import Jars, cache_dir

KAFKA_STREAMS_VERSION = "4.1.1"
JACKSON_VERSION = "2.19.0"  # the version kafka-clients/kafka-tools 4.1 are built with
SLF4J_VERSION = "1.7.36"  # Kafka 4.1 logs through the slf4j 1.7 API
JAVA_SOURCES = Path(__file__).resolve().parent / "contenders" / "kafkastreams"
JAVA_MAIN = "kstreambench.BenchApp"
_MARKER = ".complete"


class JvmError(DevServerError):
    """Java, Maven or javac is missing or failed; the message says what to do."""


#: Who needs Java here, for ``find_java``'s messages.
BENCH_JAVA = ServerKind(
    name="benchmark JVM",
    main_class="kstreambench.BenchApp",
    error=JvmError,
    needs="The Kafka Streams contender and the broker's perf tools",
    alternative="run without them (their rows say 'not available')",
    stop_command="",
)

KAFKA_STREAMS = Jars(
    name="bench-kafka-streams",
    version=KAFKA_STREAMS_VERSION,
    dependencies=(
        ("org.apache.kafka", "kafka-streams", KAFKA_STREAMS_VERSION),
        ("com.fasterxml.jackson.core", "jackson-databind", JACKSON_VERSION),
        ("org.slf4j", "slf4j-simple", SLF4J_VERSION),
    ),
    proof="kafka-streams-*.jar",
    what=f"Kafka Streams {KAFKA_STREAMS_VERSION}",
    alternative="run the benchmark without the Kafka Streams rows",
)


def broker_tools(kafka_version: str = KAFKA_VERSION) -> Jars:
    """``kafka-tools`` of the broker's Kafka version (the perf-test classes live there)."""
    return Jars(
        name="bench-kafka-tools",
        version=kafka_version,
        dependencies=(("org.apache.kafka", "kafka-tools", kafka_version),),
        proof="kafka-tools-*.jar",
        what=f"kafka-tools {kafka_version}",
        alternative="run the benchmark without the broker perf-tool rows",
    )


def resolve(jars: Jars, env: Mapping[str, str] | None = None) -> Path:
    """The directory of ``jars``' runtime closure (``kstream.dev.maven``, cached)."""
    return maven.resolve(jars, env, error=JvmError)


def classpath(*dirs: Path) -> str:
    """Every ``*.jar`` in the ``dirs`` (sorted by name) and the dirs themselves that hold
    ``.class`` trees, joined with the platform's path separator."""
    parts: list[str] = []
    for d in dirs:
        jars = sorted(d.glob("*.jar"))
        parts += [str(j) for j in jars] if jars else [str(d)]
    return os.pathsep.join(parts)


def sources_key(sources: Sequence[Path], cp: str) -> str:
    """Cache key of a compilation: the sources' names and contents and the classpath's jar
    names (a new dependency version recompiles)."""
    h = hashlib.sha256()
    for src in sorted(sources):
        h.update(src.name.encode() + b"\0" + src.read_bytes() + b"\0")
    for entry in cp.split(os.pathsep):
        h.update(Path(entry).name.encode() + b"\0")
    return h.hexdigest()[:16]


def compile_classes(sources: Sequence[Path], cp: str, env: Mapping[str, str] | None = None) -> Path:
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
        java, _ = find_java(BENCH_JAVA, env)
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
    java, _ = find_java(BENCH_JAVA, env)
    return JavaApp(java, os.pathsep.join([str(classes), cp]))


def broker_tools_app(env: Mapping[str, str] | None = None) -> JavaApp:
    """``kafka-tools`` of the broker's version: ``ProducerPerformance``, ``ConsumerPerformance``."""
    java, _ = find_java(BENCH_JAVA, env)
    return JavaApp(java, classpath(resolve(broker_tools(), env)))
