"""A description of the machine and software a benchmark ran on, for RESULTS.md."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or the platform's processor string)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass  # not Linux: fall back below
    return platform.processor() or "unknown"


def memory_gib() -> float:
    """Total memory in GiB (MemTotal of /proc/meminfo)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass  # not Linux
    return float("nan")


def version(dist: str) -> str:
    """Installed version of a distribution in this interpreter, or "not installed"."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def venv_versions(python: Path, dists: list[str]) -> dict[str, str]:
    """Versions of ``dists`` installed in the interpreter ``python`` (another venv)."""
    code = (
        "import importlib.metadata as m, sys\n"
        "for d in sys.argv[1:]:\n"
        "    try: print(d, m.version(d))\n"
        "    except m.PackageNotFoundError: print(d, 'not-installed')\n"
    )
    out = subprocess.run(
        [str(python), "-c", code, *dists], capture_output=True, text=True, timeout=60, check=True
    )
    return dict(line.split(" ", 1) for line in out.stdout.splitlines())


def cpu_steal_s() -> float | None:
    """CPU time the hypervisor has taken from this machine's CPUs since boot, in seconds
    summed over all CPUs (the ``steal`` field of /proc/stat's ``cpu`` line); None where
    there is no such counter (not Linux, or a kernel without it)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def steal_line(steal_s: float, elapsed_s: float) -> str:
    """The Machine section's line for ``steal_s`` of CPU steal over a run of ``elapsed_s``."""
    capacity = elapsed_s * (os.cpu_count() or 1)
    share = steal_s / capacity * 100 if capacity > 0 else 0.0
    return (
        f"- CPU steal during the run (time the hypervisor gave to other guests): "
        f"{steal_s:.1f} of {capacity:.0f} CPU-seconds ({share:.1f} %)"
    )


def describe(quix_python: Path | None) -> list[str]:
    """Markdown bullet lines describing this machine and the software versions."""
    load1, load5, _ = os.getloadavg()
    lines = [
        f"- CPU: {cpu_model()}, `nproc` = {os.cpu_count()}",
        f"- memory: {memory_gib():.1f} GiB; load average at start: {load1:.2f} (1 min), {load5:.2f} (5 min)",
        f"- OS: {platform.platform()}",
        f"- Python {platform.python_version()} ({platform.python_implementation()})",
        f"- kstream env: kstream {version('kstream')}, confluent-kafka {version('confluent-kafka')}, "
        f"fastavro {version('fastavro')}, rocksdict {version('rocksdict')}",
    ]
    if quix_python is not None and quix_python.exists():
        v = venv_versions(quix_python, ["quixstreams", "confluent-kafka", "fastavro", "rocksdict"])
        lines.append(
            "- Quix env (`benchmarks/.venv-quix`): "
            + ", ".join(f"{k} {val}" for k, val in v.items())
        )
    return lines
