"""Under ``CI=true`` an integration test is never skipped silently: the hooks in
``integration/conftest.py`` turn any skip (of a test, or of a whole module while it is
collected) into a failure, and a missing service fails the test
(``integration.ci.unavailable``); elsewhere all are skips with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from integration.ci import under_ci

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
SKIPPED_MODULE = """
import pytest
pytest.importorskip("kstream_no_such_module")

def test_never_collected():
    pass
"""


def run(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    ci: str,
    *args: str,
    files: tuple[str, ...] = ("test_services", "test_skipped_module"),
) -> pytest.RunResult:
    monkeypatch.setenv("CI", ci)
    pytester.makeconftest(
        "from integration.ci import pytest_make_collect_report, pytest_runtest_makereport\n"
    )
    sources = {"test_services": TESTS, "test_skipped_module": SKIPPED_MODULE}
    pytester.makepyfile(**{name: sources[name] for name in files})
    return pytester.runpytest("-rA", *args)


@pytest.mark.parametrize("args", [(), ("-n", "2")], ids=["one process", "xdist workers"])
def test_under_ci_every_skip_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    # (``make test`` runs pytest-xdist: the hook runs in its workers, which import
    # ``integration`` from the repository root)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    result = run(pytester, monkeypatch, "true", *args, files=("test_services",))
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*may not be skipped under CI=true*no broker here*"])
    result.stdout.fnmatch_lines(
        ["*no Kafka broker for integration tests under CI=true: java not found*"]
    )


@pytest.mark.parametrize("args", [(), ("-n", "2")], ids=["one process", "xdist workers"])
def test_under_ci_a_module_skipped_while_collected_fails_the_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    result = run(pytester, monkeypatch, "true", *args, files=("test_skipped_module",))
    assert result.ret != pytest.ExitCode.OK
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*integration module may not be skipped under CI=true*kstream_no_such_module*"]
    )


def test_elsewhere_they_are_skipped_with_the_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run(pytester, monkeypatch, "")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines(["*no Kafka broker for integration tests: java not found*"])


@pytest.mark.parametrize("value", ["true", "True", "1", "yes", "on"])
def test_the_runners_spellings_of_ci_all_count(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    assert under_ci()


@pytest.mark.parametrize("value", ["", "false", "0", "no"])
def test_anything_else_is_not_ci(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    assert not under_ci()


def test_the_conftests_install_the_hooks() -> None:
    # (a linter's fix may drop an import nothing in the module calls: these are hooks)
    import benchmarks.tests.conftest as bench_conftest
    import integration.ci as ci
    import integration.conftest as integration_conftest

    for conftest in (integration_conftest, bench_conftest):
        assert conftest.pytest_runtest_makereport is ci.pytest_runtest_makereport
        assert conftest.pytest_make_collect_report is ci.pytest_make_collect_report
