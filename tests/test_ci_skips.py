"""Under ``CI=true`` an integration test is never skipped silently: the hook in
``integration/conftest.py`` turns any skip into a failure, and a missing service fails
the test (``integration.ci.unavailable``); elsewhere both are skips with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
REPO = Path(__file__).resolve().parent.parent

TESTS = """
import pytest
from integration.ci import unavailable

def test_a_fixture_skips():
    pytest.skip("no broker here")

def test_a_service_is_missing():
    unavailable("no Kafka broker for integration tests", "java not found")

def test_passes():
    pass
"""


def run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str, *args: str
) -> pytest.RunResult:
    monkeypatch.setenv("CI", ci)
    pytester.makeconftest("from integration.conftest import pytest_runtest_makereport\n")
    pytester.makepyfile(test_services=TESTS)
    return pytester.runpytest("-rA", *args)


@pytest.mark.parametrize("args", [(), ("-n", "2")], ids=["one process", "xdist workers"])
def test_under_ci_every_skip_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    # (``make test`` runs pytest-xdist: the hook runs in its workers, which import
    # ``integration`` from the repository root)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    result = run(pytester, monkeypatch, "true", *args)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*may not be skipped under CI=true*no broker here*"])
    result.stdout.fnmatch_lines(
        ["*no Kafka broker for integration tests under CI=true: java not found*"]
    )


def test_elsewhere_they_are_skipped_with_the_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run(pytester, monkeypatch, "")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["*no Kafka broker for integration tests: java not found*"])
