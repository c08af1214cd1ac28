"""A fake worker process speaking the control protocol through ``ControlClient``.

It runs no tasks: it acknowledges every ``TriggerCheckpoint`` for the tasks it
claims (with a fake handle and offsets), answers ``Restore`` with ``TaskReady``
and stops on ``JobFailed``. Used by the coordinator integration tests:

    python -m integration.fake_worker --bootstrap B --app-id A --tasks t1,t2 [--member m]
        [--start-after-checkpoint N] [--never-ack]

``--start-after-checkpoint N`` makes the worker ignore triggers up to checkpoint
N — a task deployed late that missed them. It prints one line per action to
stdout (``acked <n> <task>``, ``ready <attempt> <task>``, ``failed <reason>``).
"""

from __future__ import annotations

import sys

import click

from kstream.checkpointstorage.metadata import TaskSnapshot
from kstream.kafka.control import ControlClient
from kstream.protocol.messages import (
    AcknowledgeCheckpoint,
    CheckpointCompleted,
    JobFailed,
    Restore,
    TaskReady,
    TriggerCheckpoint,
)


@click.command()
@click.option("--bootstrap", required=True)
@click.option("--app-id", required=True)
@click.option("--tasks", required=True)
@click.option("--member", default="fake-worker")
@click.option("--start-after-checkpoint", type=int, default=0)
@click.option("--from-end", is_flag=True, help="Read only new control messages.")
@click.option("--never-ack", is_flag=True, help="Report ready after a restore, never acknowledge.")
def main(
    bootstrap: str,
    app_id: str,
    tasks: str,
    member: str,
    start_after_checkpoint: int,
    from_end: bool,
    never_ack: bool,
) -> None:
    """Acknowledge checkpoints for TASKS until the job fails or the process is killed."""
    owned = [t for t in tasks.split(",") if t]
    client = ControlClient(bootstrap, app_id, from_beginning=not from_end)
    print(f"started {member} {','.join(owned)}", flush=True)
    try:
        while True:
            for msg in client.poll(0.1):
                match msg:
                    case TriggerCheckpoint(checkpoint_id=n, attempt=a):
                        if n <= start_after_checkpoint or never_ack:
                            continue
                        for task in owned:
                            client.send(
                                AcknowledgeCheckpoint(
                                    n,
                                    task,
                                    a,
                                    TaskSnapshot(
                                        f"{app_id}/fake/{task}/{n}",
                                        {f"in:{task}": n},
                                        state_size=10,
                                        member=member,
                                    ),
                                )
                            )
                            print(f"acked {n} {task}", flush=True)
                    case Restore(attempt=a):
                        for task in owned:
                            client.send(TaskReady(a, task, member, 1))
                            print(f"ready {a} {task}", flush=True)
                    case CheckpointCompleted(checkpoint_id=n):
                        print(f"completed {n}", flush=True)
                    case JobFailed(reason=reason):
                        print(f"failed {reason}", flush=True)
                        sys.exit(1)
                    case _:
                        pass
    finally:
        client.close()


if __name__ == "__main__":
    main()
