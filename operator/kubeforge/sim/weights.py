"""How long a model-server replica takes to start, given whether its weights are already on its
node (issue 29, item 5). Pure: sizes in bytes, times in seconds (float), no clock, no I/O.

A start is three steps in a row, as vLLM reports them:

1. the container's Python imports (the same cached or cold);
2. the weights: **cold**, a download from object storage into the node's disk and then a read
   of that copy; **cached**, the read of the node's copy alone;
3. the engine's initialisation (memory profiling, CUDA graphs, ``torch.compile``), the same
   cached or cold.

The published figures the defaults of :class:`WeightTimes` come from:

* llm-d, ``guides/gke-pod-snapshots`` benchmark results (llm-d/llm-d on GitHub): Qwen3-32B on
  one H100, PodScheduled to serving-ready in 4 min 38 s = **73 s imports + 130 s model load +
  73 s engine init**. Qwen3-32B in BF16 is 32.8 B parameters x 2 bytes = about 65.5 GB; read as
  a fetch from remote storage (the guide's baseline pulls the weights at start), 130 s is about
  **0.5 GB/s**: the download rate chosen here (4 Gbit/s a node).
* Issue 29's text: a 70B-405B model pulled from object storage takes **20-30 minutes**. At
  0.5 GB/s the 405B model in BF16 (810 GB) downloads in 27 min, inside that range; a 70B model
  (141 GB) in 4.7 min, below it (the issue's figure for 70B implies about 0.12 GB/s): the
  rate chosen is the generous end, so cold starts here are if anything too short, which
  flatters the cache-blind baseline, never kubeforge.
* NetEase with Fluid's warm-up (CNCF blog, 2026-05): a 70B-class start from **42 min to about
  30 s**. Read as the weights part: 141 GB in about 30 s is about 4.7 GB/s from a local copy,
  hence the local read rate chosen, **5 GB/s** (a node's NVMe RAID; 141 GB in 28 s). Their 42
  min cold (about 56 MB/s from their store) is slower than this module's cold.
* Measured (``hack/measure-weight-load.py`` on a lent H100 80GB HBM3 VM, PCIe Gen5 x16,
  2026-11-27): the copy into GPU memory is not the bound, **54.9 GB/s** from pinned host memory
  (7.0 GB/s from pageable memory, what a loader that does not pin pays); that VM's virtual
  disk read 2.0 GB/s with ``O_DIRECT`` and 5.6 GB/s from the page cache. So a cached load runs
  at the node's storage rate, and 5 GB/s is a fast NVMe RAID or a warm page cache, not slower.

Engine init and imports do not scale with the model here (llm-d's 73 s each, measured on a 32B
model): an assumption, stated so that nobody reads more into it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_TIMES", "GB", "WeightTimes", "cold_start_seconds", "download_seconds", "local_load_seconds",
           "start_seconds"]

GB = 1_000_000_000
"""Bytes in a (decimal) gigabyte: model sizes are quoted so."""


@dataclass(frozen=True)
class WeightTimes:
    """The rates and fixed costs of a replica start (see the module for the sources).

    Attributes:
        download_bps: Bytes per second a node fetches from object storage (0.5 GB/s: llm-d's
            Qwen3-32B, 65.5 GB in 130 s; the 405B model in 27 min, inside issue 29's 20-30 min).
        local_read_bps: Bytes per second a replica reads a copy on its node's disk (5 GB/s:
            NetEase/Fluid's ~30 s for a 70B-class model).
        imports_s: Seconds of the container's imports before the weights (llm-d: 73 s).
        engine_init_s: Seconds of engine initialisation after the weights (llm-d: 73 s).

    Raises:
        ValueError: A rate is not positive or a fixed cost is negative.
    """

    download_bps: float = 0.5 * GB
    local_read_bps: float = 5.0 * GB
    imports_s: float = 73.0
    engine_init_s: float = 73.0

    def __post_init__(self) -> None:
        if self.download_bps <= 0 or self.local_read_bps <= 0:
            raise ValueError("WeightTimes rates must be positive (bytes per second)")
        if self.imports_s < 0 or self.engine_init_s < 0:
            raise ValueError("WeightTimes fixed costs must not be negative (seconds)")


DEFAULT_TIMES = WeightTimes()
"""The published figures' defaults (see :class:`WeightTimes`)."""


def _size(size_bytes: int) -> int:
    if size_bytes < 0:
        raise ValueError(f"a model's size must not be negative, got {size_bytes} bytes")
    return size_bytes


def download_seconds(size_bytes: int, times: WeightTimes = DEFAULT_TIMES) -> float:
    """Seconds to fetch ``size_bytes`` of weights from object storage onto a node.

    Raises:
        ValueError: ``size_bytes`` is negative.
    """
    return _size(size_bytes) / times.download_bps


def local_load_seconds(size_bytes: int, times: WeightTimes = DEFAULT_TIMES) -> float:
    """Seconds for a replica to read ``size_bytes`` of weights from its node's disk.

    Raises:
        ValueError: ``size_bytes`` is negative.
    """
    return _size(size_bytes) / times.local_read_bps


def start_seconds(size_bytes: int, cached: bool, times: WeightTimes = DEFAULT_TIMES,
                  wait_s: float | None = None) -> float:
    """Seconds from a replica's placement to serving-ready.

    Args:
        size_bytes: The weights' size, bytes.
        cached: The node holds a verified copy: imports + local read + engine init. Otherwise
            the node must first get one: imports + the download (or ``wait_s``) + local read +
            engine init.
        times: The rates and fixed costs.
        wait_s: For a cold start, seconds until the node's copy is complete when another
            replica's download on the same node is already under way (one download a node,
            shared); None: this start downloads it, :func:`download_seconds`. Ignored when
            ``cached``.

    Returns:
        Seconds, float.

    Raises:
        ValueError: ``size_bytes`` or ``wait_s`` is negative.
    """
    fixed = times.imports_s + local_load_seconds(size_bytes, times) + times.engine_init_s
    if cached:
        return fixed
    if wait_s is not None and wait_s < 0:
        raise ValueError(f"wait_s must not be negative, got {wait_s}")
    fetch = download_seconds(size_bytes, times) if wait_s is None else wait_s
    # The download runs before the serving container starts (KServe's storage initializer is an
    # init container; kubeforge's pods wait for the node copy), so it does not overlap the imports.
    return fetch + fixed


def cold_start_seconds(size_bytes: int, times: WeightTimes = DEFAULT_TIMES) -> float:
    """Seconds of a start that downloads its own copy: :func:`start_seconds` with ``cached``
    False (for a 65.5 GB Qwen3-32B with the defaults: 131 + 73 + 13 + 73 = 290 s, llm-d's 4 min
    38 s plus the local read of the fetched copy)."""
    return start_seconds(size_bytes, False, times)
