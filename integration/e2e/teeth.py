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
from pathlib import Path

from integration.e2e.crash import EXACTLY_ONCE_PLAN, run_job
from integration.e2e.harness import Comparison, JobSettings
from integration.e2e.scenarios import wordcount

MUTANTS = {
    "sink_ignores_marker": "duplicated",
    "sink_forgets_buffer": "lost",
}


def main() -> int:
    bootstrap = os.environ.get("KSTREAM_TEST_BOOTSTRAP", "127.0.0.1:19092")
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 440776
    unnoticed = []
    for name, symptom in MUTANTS.items():
        scenario = wordcount(random.Random(seed))
        preamble = f"from integration.e2e.mutants import {name}; {name}()"
        result = run_job(
            bootstrap,
            scenario,
            Path(tempfile.mkdtemp(prefix=f"kstream-teeth-{name}-")),
            seed=seed,
            settings=JobSettings(preamble=preamble),
            plan=EXACTLY_ONCE_PLAN,
        )
        cmp = Comparison.of(scenario.expected, scenario.actual([r.value for r in result.sink]))
        caught = sum(getattr(cmp, symptom).values()) > 0
        print(f"[teeth] {name}: {cmp.describe()} -> {'caught' if caught else 'UNNOTICED'}")
        if not caught:
            unnoticed.append(name)
    return 1 if unnoticed else 0


if __name__ == "__main__":
    sys.exit(main())
