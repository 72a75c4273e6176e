"""``python -m e2e.bench.model_cache``: :func:`e2e.bench.model_cache.cli.main`."""

import sys

from e2e.bench.model_cache.cli import main

sys.exit(main())
