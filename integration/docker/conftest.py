"""Fixtures of the Docker image tests (run by ``make docker-test``)."""

from integration.docker.engine import containers

__all__ = ["containers"]
