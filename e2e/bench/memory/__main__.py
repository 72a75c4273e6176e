"""``python -m e2e.bench.memory``: :func:`e2e.bench.memory.cli.main`, in the kubeforge tree ``--operator-src`` names."""

import sys

from e2e.bench.lib.source import reexec_for_operator_src


def _main() -> int:
    reexec_for_operator_src("e2e.bench.memory")  # before anything imports kubeforge
    from e2e.bench.memory.cli import main

    return main()


sys.exit(_main())
