"""What a missing service or capability does to an integration test: under ``CI=true``
it fails the run (never a silent skip: the two hooks below, imported by the conftests of
``integration/`` and ``benchmarks/tests/``, turn any skip into a failure); elsewhere the
test is skipped with the reason."""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any, NoReturn

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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """Under ``CI=true`` no integration test is skipped silently: a skip from anywhere
    (a fixture, a marker, a library's ``importorskip``) is reported as a failure."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.skipped and under_ci() and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"an integration test may not be skipped under CI=true: {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    """The same for a whole module skipped while it is collected (a module-level
    ``pytest.skip`` or ``importorskip``): under ``CI=true`` that is a collection error."""
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    if report.skipped and under_ci():
        report.outcome = "failed"
        report.longrepr = (
            f"an integration module may not be skipped under CI=true: {report.longrepr}"
        )
