"""The Schema Registry launcher's build step (kstream.dev.maven.build) with a fake
``mvn`` on a private PATH: built once and cached, what it builds, and failures that
say what to do. The real registry runs in integration/test_schema_registry.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kstream.dev.maven import Build, build
from kstream.dev.schemaregistry import RUNNER, SchemaRegistryError, registry_build


def fake_mvn(bin_dir: Path, script: str) -> dict[str, str]:
    bin_dir.mkdir(parents=True, exist_ok=True)
    mvn = bin_dir / "mvn"
    mvn.write_text("#!/bin/sh\n" + script)
    mvn.chmod(mvn.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "XDG_CACHE_HOME": str(bin_dir.parent / "cache")}


def test_built_once_then_taken_from_the_cache(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    env = fake_mvn(
        tmp_path / "bin",
        f'echo "$@" >> {calls}\n'
        "test -f pom.xml && test -f central-only.xml || exit 3\n"
        f"mkdir -p target/lib && echo jar > target/{RUNNER} && echo dep > target/lib/a.jar\n",
    )
    home = build(registry_build(), env, error=SchemaRegistryError)
    assert (home / RUNNER).read_text() == "jar\n"
    assert (home / "lib" / "a.jar").is_file()
    assert home.name == "apicurio-registry-2.4.2.Final"
    assert build(registry_build(), env, error=SchemaRegistryError) == home
    assert calls.read_text().splitlines() == [
        "-q -B -gs central-only.xml package -DskipTests"
    ]  # once: the second call found the marker


def test_what_the_build_is_made_of() -> None:
    spec = registry_build()
    assert "<artifactId>apicurio-registry-app</artifactId>" in spec.files["pom.xml"]
    assert "quarkus-maven-plugin" in spec.files["pom.xml"]
    assert (
        "DynamicConfigPropertyList" in spec.files["src/main/java/kstream/registry/ConfigBeans.java"]
    )


def test_a_failed_build_says_why_and_caches_nothing(tmp_path: Path) -> None:
    env = fake_mvn(tmp_path / "bin", "echo 'Could not resolve io.apicurio:x' >&2\nexit 1\n")
    spec = Build(
        "thing",
        "1",
        {"pom.xml": "<project/>"},
        ("target/x.jar",),
        "x.jar",
        "Thing 1",
        "use another",
    )
    with pytest.raises(SchemaRegistryError) as e:
        build(spec, env, error=SchemaRegistryError)
    assert "building Thing 1 from Maven Central failed (exit 1" in str(e.value)
    assert "Could not resolve io.apicurio:x" in str(e.value)
    assert not (Path(env["XDG_CACHE_HOME"]) / "kstream" / "thing-1" / ".complete").exists()


def test_no_maven_says_what_to_do(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    with pytest.raises(SchemaRegistryError, match="Maven \\('mvn'\\) is not on PATH"):
        build(registry_build(), env, error=SchemaRegistryError)
    assert os.path.isdir(tmp_path / "cache")
