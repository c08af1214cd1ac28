"""`kstream dev`: developer conveniences — a local Kafka broker (kafka), a local S3
server (s3), both on one start/stop/status plumbing (servers), and small topic tools
(topics)."""

from __future__ import annotations

import click

from kstream.cli.dev.kafka import kafka
from kstream.cli.dev.s3 import s3
from kstream.cli.dev.topics import consume, produce, topics


@click.group()
def dev() -> None:
    """Developer tools: a local Kafka broker, a local S3 server and topic helpers.

    For demos and tests; not for production clusters.
    """


for command in (kafka, s3, topics, produce, consume):
    dev.add_command(command)
