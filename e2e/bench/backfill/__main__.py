"""``python -m e2e.bench.backfill``: :func:`e2e.bench.backfill.cli.main`."""

import sys

from e2e.bench.backfill.cli import main

sys.exit(main())
