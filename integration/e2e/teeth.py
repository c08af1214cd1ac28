"""Run the exactly-once wordcount crash test against broken sinks; each must be caught.

    KSTREAM_TEST_BOOTSTRAP=127.0.0.1:19092 python -m integration.e2e.teeth [SEED]

Prints the comparison per mutant and exits 1 if a mutant went unnoticed (about
one minute per mutant).
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from integration.e2e.crash import EXACTLY_ONCE_PLAN, run_job
from integration.e2e.harness import Comparison, JobSettings
from integration.e2e.scenarios import wordcount

MUTANTS = {
    "sink_ignores_marker": "duplicated",
    "sink_forgets_buffer": "lost",
}


@dataclass(frozen=True)
class Verdict:
    """What the crash test saw of one broken sink."""

    mutant: str
    symptom: str
    comparison: str
    caught: bool


def check(bootstrap: str, seed: int, workdir: Path) -> list[Verdict]:
    """Run the exactly-once word-count crash test once per broken sink."""
    verdicts = []
    for name, symptom in MUTANTS.items():
        scenario = wordcount(random.Random(seed))
        preamble = f"from integration.e2e.mutants import {name}; {name}()"
        (workdir / name).mkdir(parents=True, exist_ok=True)
        result = run_job(
            bootstrap,
            scenario,
            workdir / name,
            seed=seed,
            settings=JobSettings(preamble=preamble),
            plan=EXACTLY_ONCE_PLAN,
        )
        cmp = Comparison.of(scenario.expected, scenario.actual([r.value for r in result.sink]))
        caught = sum(getattr(cmp, symptom).values()) > 0
        verdicts.append(Verdict(name, symptom, cmp.describe(), caught))
    return verdicts


def main() -> int:
    bootstrap = os.environ.get("KSTREAM_TEST_BOOTSTRAP", "127.0.0.1:19092")
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 440776
    verdicts = check(bootstrap, seed, Path(tempfile.mkdtemp(prefix="kstream-teeth-")))
    for v in verdicts:
        print(f"[teeth] {v.mutant}: {v.comparison} -> {'caught' if v.caught else 'UNNOTICED'}")
    return 1 if any(not v.caught for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
