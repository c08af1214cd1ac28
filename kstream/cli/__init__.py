"""The ``kstream`` command line (click): :mod:`kstream.cli.main`, one module per subcommand.

Exit codes: 0 done, 1 job failed, 2 usage or configuration error.
"""

from kstream.cli.main import main

__all__ = ["main"]
