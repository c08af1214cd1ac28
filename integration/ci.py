"""What a missing service or capability does to an integration test: under ``CI=true``
it fails the run (never a silent skip, see also ``pytest_runtest_makereport`` in
``integration/conftest.py``); elsewhere the test is skipped with the reason."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def under_ci() -> bool:
    """Whether ``CI`` is set to a true value (``true``, ``1``, ``yes``, ``on``: runners
    spell it differently)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes", "on")


def unavailable(what: str, reason: str) -> NoReturn:
    """A service or capability the tests need cannot be had: under ``CI=true`` the run
    fails; elsewhere the test is skipped, with the reason either way."""
    if under_ci():
        pytest.fail(f"{what} under CI=true: {reason}", pytrace=False)
    pytest.skip(f"{what}: {reason}")
