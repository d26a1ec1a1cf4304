"""The environment fingerprint stored on every record, and the machine key that baselines and
``--resume`` match on. Read without initialising CUDA (NVML and torch's build info); the
measured matmul ceiling (``gemm_tflops``, or ``gemm_absent`` and why) comes from a child process
once per machine key (benchbay.collect.gemm_probe)."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import socket
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import psutil
import torch

from benchbay.collect import gemm_probe, nvml

KEY_PACKAGES = ("transformers", "diffusers", "torchcodec", "av", "decord", "triton", "numpy", "benchbay")


def fingerprint(project_dir: str | Path = ".") -> dict:
    gpus = nvml.devices()
    gpu = gpus[0]["name"] if gpus else None
    env = {
        "gpu": gpu,
        "gpu_count": len(gpus),
        "driver": gpus[0]["driver"] if gpus else None,
        "cuda": torch.version.cuda,
        "torch": torch.__version__.split("+")[0],
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cpu_count": psutil.cpu_count(logical=True),
        "git_commit": _git_commit(project_dir),
        "hostname_hash": hashlib.sha1(socket.gethostname().encode()).hexdigest()[:10],
        # which cards ran it: the GPU hosts lent here share one hostname, and two H200s differ by
        # more than a loader costs (GEMM probes of 658 and 668 TFLOP/s); data_loading pairs on it
        "gpu_uuid_hash": hashlib.sha1(",".join(g["uuid"] for g in gpus).encode()).hexdigest()[:10] if gpus else None,
        "packages": {name: _version(name) for name in KEY_PACKAGES},
    }
    env["machine_key"] = machine_key(env)
    env.update(gemm_probe.ceiling(env["machine_key"], gpu is not None))
    return env


def machine_key(env: dict) -> str:
    """e.g. 'nvidia-h200x1-cuda13.0-torch2.11.0' or 'cpu-amd-epyc-9r14x2-torch2.13.0'."""
    if env.get("gpu"):
        hw = f"{_slug(env['gpu'])}x{env['gpu_count']}-cuda{env.get('cuda')}"
    else:
        hw = f"cpu-{_slug(env.get('cpu') or 'unknown')}x{env.get('cpu_count')}"
    return f"{hw}-torch{env.get('torch')}"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")[:40]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit(project_dir: str | Path) -> str | None:
    if os.environ.get("BENCHBAY_GIT_COMMIT"):  # set where the tree travels without .git (GPU runs)
        return os.environ["BENCHBAY_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project_dir, capture_output=True, text=True,
                             timeout=5)
        commit = out.stdout.strip()
        if out.returncode != 0 or not commit:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=project_dir,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None
