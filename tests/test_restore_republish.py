"""A task restored to a checkpoint older than what its exactly-once sink published
refuses (issue 37 point B): processing from the older checkpoint's positions would
publish that output again in epochs no marker covers."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kstream.config import Guarantee
from kstream.kafka.commits import CommitMarker
from kstream.kafka.exactly_once_sink import ExactlyOnceSink
from kstream.kafka.sink import AtLeastOnceSink
from kstream.snapshots.restore import PublishedPastRestore
from kstream.worker.opening import refuse_republishing


def _runner(marker: CommitMarker | None) -> Any:
    sink = ExactlyOnceSink.__new__(ExactlyOnceSink)  # as recover left it: no broker here
    sink.marker, sink.commits_topic = marker, "app.commits"
    other = AtLeastOnceSink.__new__(AtLeastOnceSink)
    return SimpleNamespace(sinks={Guarantee.EXACTLY_ONCE: sink, Guarantee.AT_LEAST_ONCE: other})


def test_a_sink_that_published_a_newer_checkpoint_refuses_the_older_one() -> None:
    with pytest.raises(PublishedPastRestore) as e:
        refuse_republishing(_runner(CommitMarker("stage0-1", 8, 3)), 7, "app/tasks/t/chk-7.json")
    assert (e.value.published, e.value.object) == (8, "app.commits")
    assert str(e.value) == (
        "its exactly-once sink already published the output of checkpoint 8 (commit "
        "marker of attempt 3); restoring checkpoint 7 would publish output twice"
    )


@pytest.mark.parametrize(
    ("marker", "checkpoint"),
    [
        (None, 7),
        (CommitMarker("t", 7, 1), 7),
        (CommitMarker("t", 5, 1), 7),
        (CommitMarker("t", 9, 1), None),
    ],
)
def test_a_sink_at_or_behind_the_checkpoint_restores(
    marker: CommitMarker | None, checkpoint: int | None
) -> None:
    refuse_republishing(_runner(marker), checkpoint, "h")  # start positions: nothing to keep
