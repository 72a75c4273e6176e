"""``python -m e2e.bench.keda_live``: :func:`e2e.bench.keda_live.cli.main`."""

import sys

from e2e.bench.keda_live.cli import main

sys.exit(main())
