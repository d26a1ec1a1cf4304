"""The matmul ceiling measured on this machine: a short square GEMM (bf16 on a GPU, fp32 on CPU)
timed for a few seconds, in TFLOP/s, as an MFU denominator beside the datasheet's peak. Cached per
machine key (one probe per machine, not per point): ``<cache>/gemm-<machine_key>.json``.

The environment fingerprint takes it through :func:`ceiling`, which probes in a child process
(``python -m benchbay.collect.gemm_probe KEY CACHE``): the runner itself never initialises CUDA,
whose context would hold device memory through every point."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import torch

CACHE = Path.home() / ".cache" / "benchbay"
#: the GEMM's side: large enough to reach the ceiling on an H200, small on CPU
SIDE = {"cuda": 8192, "cpu": 1024}


def probe(device: torch.device, seconds: float = 3.0, side: int | None = None) -> float:
    """TFLOP/s of back-to-back ``side``-square matmuls over about ``seconds`` (one warm-up first)."""
    n = side or SIDE[device.type]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    a @ b  # warm-up: cuBLAS picks its kernel here
    sync()
    runs, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        a @ b
        runs += 1
        if device.type == "cuda" and runs % 10:  # batches of launches between syncs keep the GPU fed
            continue
        sync()
    sync()
    return 2 * n**3 * runs / (time.perf_counter() - started) / 1e12


def _cached(cache: Path, machine_key: str) -> Path:
    return Path(cache) / f"gemm-{machine_key}.json"


def measured_tflops(device: torch.device, machine_key: str, cache: Path = CACHE, **options) -> dict[str, float | str]:
    """The probe's figure for this machine, from the cache when it was measured before."""
    path = _cached(cache, machine_key)
    if path.exists():
        return json.loads(path.read_text())
    figure = {"gemm_tflops": probe(device, **options),
              "gemm_dtype": "bf16" if device.type == "cuda" else "fp32"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figure))
    return figure


def ceiling(machine_key: str, gpu: bool, cache: Path = CACHE, timeout_s: float = 120.0) -> dict[str, float | str]:
    """The fingerprint's figure (``gemm_tflops``, ``gemm_dtype``): this machine's cached probe, else
    one measured in a child process; on CPU, or where the probe failed, ``gemm_absent`` says why."""
    if not gpu:
        return {"gemm_absent": "no GPU: the ceiling is a GPU's bf16 matmuls (MFU on CPU has no peak)"}
    path = _cached(cache, machine_key)
    if not path.exists():
        command = [sys.executable, "-m", "benchbay.collect.gemm_probe", machine_key, str(cache)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"gemm_absent": f"the GEMM probe took over {timeout_s:g} s"}
        if done.returncode or not path.exists():
            last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
            return {"gemm_absent": f"the GEMM probe failed: {last}"}
    return json.loads(path.read_text())


if __name__ == "__main__":
    measured_tflops(torch.device("cuda"), sys.argv[1], Path(sys.argv[2]))
