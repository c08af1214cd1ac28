"""The Docker engine the image tests use: the ``docker`` CLI on ``DOCKER_HOST``.

``make docker-test`` (scripts/docker/test.sh) starts the engine, builds the images and
writes their names into ``docker/images.env``; the fixtures here read them. Without an
engine the tests are unavailable (a failure under ``CI=true``, as for any integration
test). Containers a test starts are removed by the test (:class:`Containers`).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.ci import unavailable

REPO = Path(__file__).resolve().parents[2]
IMAGES_ENV = REPO / "docker" / "images.env"


def docker(*args: str, check: bool = True, timeout: float = 300.0) -> str:
    """``docker ARGS``' stdout; a failure raises with docker's own message."""
    proc = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc.stdout.strip()


def images() -> dict[str, str]:
    """The images ``scripts/docker/build-images.sh`` built (docker/images.env)."""
    if not IMAGES_ENV.is_file():
        unavailable("no kstream images", f"{IMAGES_ENV} is missing: run make docker-test")
    pairs = (line.split("=", 1) for line in IMAGES_ENV.read_text().splitlines() if "=" in line)
    return {k: v for k, v in pairs}


def inspect(name: str) -> dict[str, Any]:
    data: list[dict[str, Any]] = json.loads(docker("inspect", name))
    return data[0]


def metric_sum(port: int, name: str) -> float:
    """The sum of ``name``'s samples on ``http://127.0.0.1:port/metrics`` (0 if none yet;
    -1 when the endpoint does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return -1.0
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((f"{name} ", f"{name}{{"))
    )


class Containers:
    """Containers started by one test, removed (with their anonymous volumes) at its end."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def run(self, name: str, *args: str) -> str:
        docker("run", "-d", "--name", name, *args)
        self.names.append(name)
        return name

    def remove_all(self) -> None:
        for name in self.names:
            docker("rm", "-f", "-v", name, check=False)


@pytest.fixture
def containers() -> Iterator[Containers]:
    if docker("version", "-f", "{{.Server.Version}}", check=False) == "":
        unavailable(
            "no Docker engine",
            f"docker does not answer at {os.environ.get('DOCKER_HOST', 'the default socket')}: "
            "run make docker-test",
        )
    c = Containers()
    try:
        yield c
    finally:
        c.remove_all()
