"""NVML readings (nvidia-ml-py). Absent NVML or no NVIDIA GPU is not an error: every call
returns None or an empty result."""

from __future__ import annotations

import functools

from benchbay.record import GPU_POWER_W, GPU_SM_CLOCK_MHZ, GPU_UTIL

GIB = 1024**3


@functools.cache
def library():
    """The initialised pynvml module, or None where NVML cannot be used."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no library, no driver, no GPU
        return None


@functools.cache
def _handle(cuda_index: int):
    """NVML's handle of a CUDA device. NVML numbers GPUs in PCI order and ignores
    CUDA_VISIBLE_DEVICES, so the device is found by its UUID; the index is the fall-back."""
    lib = library()
    if lib is None:
        return None, None
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(cuda_index).uuid)
        return lib, lib.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else "GPU-" + uuid)
    except Exception:
        pass
    try:
        return lib, lib.nvmlDeviceGetHandleByIndex(cuda_index)
    except Exception:
        return None, None


def devices() -> list[dict[str, str]]:
    """Name, UUID and driver version of each visible GPU."""
    lib = library()
    if lib is None:
        return []
    try:
        driver = lib.nvmlSystemGetDriverVersion()
        handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(lib.nvmlDeviceGetCount())]
        return [{"name": lib.nvmlDeviceGetName(h), "uuid": lib.nvmlDeviceGetUUID(h), "driver": driver} for h in handles]
    except Exception:
        return []


def memory_used_gib(index: int) -> float | None:
    lib, handle = _handle(index)
    if handle is None:
        return None
    try:
        return lib.nvmlDeviceGetMemoryInfo(handle).used / GIB
    except Exception:
        return None


def sample(index: int) -> dict[str, float]:
    """Utilisation (%), power (W) and SM clock (MHz) now; missing readings are left out."""
    lib, handle = _handle(index)
    if handle is None:
        return {}
    out = {}
    for key, read in ((GPU_UTIL, lambda: lib.nvmlDeviceGetUtilizationRates(handle).gpu),
                      (GPU_POWER_W, lambda: lib.nvmlDeviceGetPowerUsage(handle) / 1e3),
                      (GPU_SM_CLOCK_MHZ, lambda: lib.nvmlDeviceGetClockInfo(handle, lib.NVML_CLOCK_SM))):
        try:
            out[key] = float(read())
        except Exception:
            pass
    return out


def total_energy_mj(index: int) -> float | None:
    """The GPU's energy counter (millijoules since the driver loaded; Volta and later)."""
    lib, handle = _handle(index)
    if handle is None:
        return None
    try:
        return float(lib.nvmlDeviceGetTotalEnergyConsumption(handle))
    except Exception:
        return None
