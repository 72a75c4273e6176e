"""``python -m e2e.bench.lws_live``: :func:`e2e.bench.lws_live.cli.main`."""

import sys

from e2e.bench.lws_live.cli import main

sys.exit(main())
