"""A development server's jars from Maven Central, resolved (or built) once with ``mvn`` and cached.

Every launcher of :mod:`kstream.dev` (the Kafka broker, S3Proxy) runs a JVM on a
directory of jars: the runtime dependencies of a throw-away pom, copied by
``mvn dependency:copy-dependencies`` into ``$XDG_CACHE_HOME/kstream/<name>-<version>/libs``
(default ``~/.cache``). A marker file written only after a complete resolution
makes later calls skip Maven entirely; a file lock serialises concurrent first
resolutions (parallel test sessions).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kstream.dev.jvm import DevServerError, tail

MARKER = ".complete"


@dataclass(frozen=True)
class Jars:
    """What to resolve: ``dependencies`` (group, artifact, version) whose runtime closure
    runs ``what``; ``proof``, a glob that matches only once the main jar is there;
    ``alternative``, what a user without Maven or network can do instead."""

    name: str  # the cache directory is <name>-<version>
    version: str
    dependencies: tuple[tuple[str, str, str], ...]
    proof: str
    what: str
    alternative: str


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where resolved jars are cached: ``$XDG_CACHE_HOME/kstream`` or ``~/.cache/kstream``."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kstream"


def resolution_pom(jars: Jars) -> str:
    """A throw-away Maven pom whose runtime dependencies are ``jars``' complete classpath."""
    body = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>"
        for g, a, v in jars.dependencies
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        f"  <groupId>kstream.local</groupId><artifactId>{jars.name}</artifactId>"
        "<version>1</version>\n"
        f"  <dependencies>\n{body}\n  </dependencies>\n</project>\n"
    )


def resolve(
    jars: Jars, env: Mapping[str, str] | None = None, *, error: type[DevServerError]
) -> Path:
    """The directory of ``jars``: downloaded once with ``mvn``, then taken from the cache.
    Raises ``error`` saying what to do when Maven is missing or the resolution fails."""
    env = os.environ if env is None else env
    home = cache_dir(env) / f"{jars.name}-{jars.version}"
    libs = home / "libs"
    if (home / MARKER).is_file():
        return libs
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be resolving right now
        if (home / MARKER).is_file():
            return libs
        mvn = shutil.which("mvn", path=env.get("PATH", ""))
        if mvn is None:
            raise error(
                f"{jars.what} is not cached in {home} and Maven ('mvn') is not on PATH to "
                f"download it. Install Maven, or {jars.alternative}."
            )
        shutil.rmtree(libs, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="kstream-mvn-") as work:
            (Path(work) / "pom.xml").write_text(resolution_pom(jars))
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
        if proc.returncode != 0 or not any(libs.glob(jars.proof)):
            raise error(
                f"resolving {jars.what} from Maven Central failed (exit {proc.returncode}; "
                f"needs network access to repo.maven.apache.org, or {jars.alternative}). "
                f"Last lines of mvn's output:\n{tail(proc.stdout + proc.stderr)}"
            )
        (home / MARKER).write_text(f"{jars.version}\n")
    return libs


@dataclass(frozen=True)
class Build:
    """A Maven project to build once (``mvn package``) and cache: ``files`` (path -> text,
    ``pom.xml`` among them) are written to a work directory, ``outputs`` (paths under it,
    e.g. ``target/lib``) are kept in the cache directory ``<name>-<version>``; ``proof``,
    a glob under it that matches only once the build's main output is there. Repositories
    other than Maven Central that a dependency's pom names are redirected to Central."""

    name: str
    version: str
    files: Mapping[str, str]
    outputs: tuple[str, ...]
    proof: str
    what: str
    alternative: str


_CENTRAL_ONLY = (
    "<settings><mirrors><mirror><id>kstream-central-only</id>"
    "<mirrorOf>external:*,!central</mirrorOf>"
    "<url>https://repo.maven.apache.org/maven2</url></mirror></mirrors></settings>\n"
)


def build(
    spec: Build, env: Mapping[str, str] | None = None, *, error: type[DevServerError]
) -> Path:
    """The cache directory of ``spec``'s outputs: built once with ``mvn``, then reused.
    Raises ``error`` saying what to do when Maven is missing or the build fails."""
    env = os.environ if env is None else env
    home = cache_dir(env) / f"{spec.name}-{spec.version}"
    if (home / MARKER).is_file():
        return home
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building right now
        if (home / MARKER).is_file():
            return home
        mvn = shutil.which("mvn", path=env.get("PATH", ""))
        if mvn is None:
            raise error(
                f"{spec.what} is not built in {home} and Maven ('mvn') is not on PATH to "
                f"build it. Install Maven, or {spec.alternative}."
            )
        with tempfile.TemporaryDirectory(prefix="kstream-mvn-") as tmp:
            work = Path(tmp)
            for rel, text in {**spec.files, "central-only.xml": _CENTRAL_ONLY}.items():
                (work / rel).parent.mkdir(parents=True, exist_ok=True)
                (work / rel).write_text(text)
            cmd = [mvn, "-q", "-B", "-gs", "central-only.xml", "package", "-DskipTests"]
            proc = subprocess.run(
                cmd, cwd=work, capture_output=True, text=True, env=dict(env), check=False
            )
            for out in spec.outputs:
                shutil.rmtree(home / Path(out).name, ignore_errors=True)
                source = work / out
                if source.is_dir():
                    shutil.copytree(source, home / source.name)
                elif source.is_file():
                    shutil.copy2(source, home / source.name)
        if proc.returncode != 0 or not any(home.glob(spec.proof)):
            raise error(
                f"building {spec.what} from Maven Central failed (exit {proc.returncode}; "
                f"needs network access to repo.maven.apache.org, or {spec.alternative}). "
                f"Last lines of mvn's output:\n{tail(proc.stdout + proc.stderr)}"
            )
        (home / MARKER).write_text(f"{spec.version}\n")
    return home
