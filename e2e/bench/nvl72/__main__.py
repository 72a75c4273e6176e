"""``python -m e2e.bench.nvl72``: :func:`e2e.bench.nvl72.cli.main`."""

import sys

from e2e.bench.nvl72.cli import main

sys.exit(main())
