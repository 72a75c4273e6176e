"""``python -m e2e.bench.scale``: :func:`e2e.bench.scale.cli.main`."""

import sys

from e2e.bench.scale.cli import main

sys.exit(main())
