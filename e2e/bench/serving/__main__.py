"""``python -m e2e.bench.serving``: :func:`e2e.bench.serving.cli.main`, in the kubeforge tree ``--operator-src`` names."""

import sys

from e2e.bench.lib.source import reexec_for_operator_src


def _main() -> int:
    reexec_for_operator_src("e2e.bench.serving")  # before anything imports kubeforge
    from e2e.bench.serving.cli import main

    return main()


sys.exit(_main())
