"""`kstream dev`: developer conveniences (the embedded local Kafka broker)."""

from __future__ import annotations

import click


@click.group()
def dev() -> None:
    """Developer tools: a local single-node Kafka broker for demos and tests."""
