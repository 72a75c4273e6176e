"""``python -m e2e.bench.preemption_live``: :func:`e2e.bench.preemption_live.cli.main`."""

import sys

from e2e.bench.preemption_live.cli import main

sys.exit(main())
