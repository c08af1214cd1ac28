"""What a failed crash test prints about its job: the lines of every incarnation's log
that tell what happened (restores, failovers, publications that failed, errors), in
time order, and the committed commit markers per task. A failure in CI is then read
from its output, without the logs it ran with."""

from __future__ import annotations

import re
from collections import defaultdict

from integration.e2e.harness import JobUnderTest
from integration.edge_tools import markers

NOTABLE = re.compile(
    r"WARNING|ERROR|restor|restart \(attempt|aborted|fenced|did not answer|published \d+"
    r"|recovered in attempt|stopping it here|assigned|revoked|mid-firing"
)
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}")


def incident_report(job: JobUnderTest, bootstrap: str, limit: int = 200) -> str:
    """The notable log lines of ``job`` (the last ``limit``, each cut to 300 characters,
    prefixed with its process) and the markers each task committed."""
    lines: list[tuple[str, str]] = []
    for p in job.procs:
        kept = None  # the time of the last line kept: its continuation lines go with it
        for ln in p.text().splitlines():
            m = STAMP.match(ln)
            if m is None:
                if kept is not None:  # e.g. the per-operator late counts
                    lines.append((kept, f"{p.log.name}:   {ln[:300]}"))
                continue
            kept = m.group(0) if NOTABLE.search(ln) else None
            if kept is not None:
                lines.append((kept, f"{p.log.name}: {ln[:300]}"))
    lines.sort(key=lambda x: x[0])  # stable: continuation lines stay after theirs
    out = [f"[incidents] {len(lines)} notable log lines, the last {limit}:"]
    out += [text for _, text in lines[-limit:]]
    per_task: dict[str, list[str]] = defaultdict(list)
    try:
        for mk in markers(bootstrap, job.app):
            per_task[str(mk.get("task"))].append(f"{mk.get('checkpoint')}@{mk.get('attempt')}")
    except Exception as e:  # a diagnosis must not hide the failure it explains
        out.append(f"[incidents] markers unreadable: {e}")
    for task, seen in sorted(per_task.items()):
        out.append(f"[incidents] markers of {task}: {' '.join(seen)}")
    return "\n".join(out)
