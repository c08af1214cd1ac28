"""Under ``CI=true`` no benchmark test is skipped silently either (``integration.ci``)."""

from integration.ci import pytest_make_collect_report, pytest_runtest_makereport

__all__ = ["pytest_make_collect_report", "pytest_runtest_makereport"]
