"""End-to-end crash tests of whole jobs: harness, scenarios (see ``harness`` and ``scenarios``)."""
