"""``python -m e2e.bench.autoscaling``: :func:`e2e.bench.autoscaling.cli.main`."""

import sys

from e2e.bench.autoscaling.cli import main

sys.exit(main())
