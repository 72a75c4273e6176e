#!/usr/bin/env python3
"""Measure the two rates a cached model start reads its weights at, on a real GPU node.

``kubeforge.sim.weights`` models a cached start's weight load at ``local_read_bps`` (5 GB/s,
derived from llm-d's published figures). This script measures, on the machine it runs on:

* **disk**: sequential read of a file written with ``O_DIRECT`` and read back with ``O_DIRECT``
  (the page cache bypassed: what a node's first load of a cached copy reads), GB/s;
* **page cache**: the same file read again through the page cache, GB/s;
* **host to GPU**: ``cuMemcpyHtoD`` of a pageable and of a pinned (``cuMemHostAlloc``) buffer
  into device memory, GB/s, through the CUDA driver API (``libcuda.so.1``, present wherever the
  NVIDIA driver is; no torch needed).

Usage: ``python3 hack/measure-weight-load.py [--size-gib N] [--dir DIR] [--json FILE]``.
Prints one JSON object; a part that cannot run says why in it. Standard library only.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import platform
import subprocess
import time

GB = 1e9
CHUNK = 64 << 20  # 64 MiB per read/write call


def _aligned(n: int) -> mmap.mmap:
    return mmap.mmap(-1, n)  # page-aligned, as O_DIRECT needs


def disk(path: str, size: int) -> dict:
    """Write ``size`` bytes with O_DIRECT, read them back with O_DIRECT, then through the cache."""
    buf = _aligned(CHUNK)
    buf.write(os.urandom(1 << 20) * (CHUNK >> 20))
    out: dict = {"bytes": size}
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_DIRECT, 0o600)
    t = time.perf_counter()
    for _ in range(size // CHUNK):
        os.write(fd, buf)
    os.fsync(fd)
    os.close(fd)
    out["write_direct_GBps"] = size / (time.perf_counter() - t) / GB
    for name, flags in (("read_direct_GBps", os.O_RDONLY | os.O_DIRECT), ("read_cached_first_GBps", os.O_RDONLY),
                        ("read_cached_again_GBps", os.O_RDONLY)):
        fd = os.open(path, flags)
        t, n = time.perf_counter(), 0
        while (got := os.readv(fd, [buf])) > 0:
            n += got
        os.close(fd)
        out[name] = n / (time.perf_counter() - t) / GB
    os.unlink(path)
    return out


def _check(cu, call: str, *args) -> None:
    rc = getattr(cu, call)(*args)
    if rc != 0:
        raise RuntimeError(f"{call} returned CUDA error {rc}")


def host_to_gpu(size: int, repeats: int = 5) -> dict:
    """``cuMemcpyHtoD`` of ``size`` bytes, pageable and pinned, best of ``repeats``, GB/s."""
    cu = ctypes.CDLL("libcuda.so.1")
    _check(cu, "cuInit", 0)
    dev, ctx, dptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    _check(cu, "cuDeviceGet", ctypes.byref(dev), 0)
    name = ctypes.create_string_buffer(256)
    _check(cu, "cuDeviceGetName", name, 256, dev)
    _check(cu, "cuCtxCreate_v2", ctypes.byref(ctx), 0, dev)
    _check(cu, "cuMemAlloc_v2", ctypes.byref(dptr), ctypes.c_size_t(size))
    out: dict = {"device": name.value.decode(), "bytes": size}
    cu.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
    pageable = ctypes.create_string_buffer(size)
    pinned = ctypes.c_void_p()
    _check(cu, "cuMemHostAlloc", ctypes.byref(pinned), ctypes.c_size_t(size), 0)
    ctypes.memset(pinned, 1, size)
    for label, src in (("pageable_GBps", ctypes.cast(pageable, ctypes.c_void_p)), ("pinned_GBps", pinned)):
        best = 0.0
        for _ in range(repeats):
            t = time.perf_counter()
            _check(cu, "cuMemcpyHtoD_v2", dptr.value, src, ctypes.c_size_t(size))
            _check(cu, "cuCtxSynchronize")
            best = max(best, size / (time.perf_counter() - t) / GB)
        out[label] = best
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-gib", type=float, default=8.0, help="file and copy size, GiB")
    ap.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"), help="where the test file goes")
    ap.add_argument("--json", default=None, help="also write the result here")
    a = ap.parse_args()
    size = int(a.size_gib * (1 << 30)) // CHUNK * CHUNK
    result: dict = {"host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count()}
    try:
        result["gpus"] = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        result["gpus"] = f"nvidia-smi: {e}"
    for key, fn in (("disk", lambda: disk(os.path.join(a.dir, "kubeforge-weights.bin"), size)),
                    ("host_to_gpu", lambda: host_to_gpu(min(size, 4 << 30)))):
        try:
            result[key] = fn()
        except Exception as e:  # noqa: BLE001 - each part reports its own failure
            result[key] = {"error": f"{type(e).__name__}: {e}"}
    text = json.dumps(result, indent=2)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
