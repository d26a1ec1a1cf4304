"""Decoding as a training job runs it: a map-style dataset whose item is one sample, behind a torch
DataLoader (num_workers, prefetch_factor, pin_memory), and a foreground loop standing in for the
training step to show what the workers' decoding costs it (interference)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from benchbay.decode.backends import Settings, backend
from benchbay.decode.backends.base import Backend, Handle
from benchbay.decode.measure import ViewTiming
from benchbay.decode.patterns import Pattern, ViewRequest

#: how many files a worker keeps open with ``keep_open`` (least recently used closed first)
OPEN_FILES = 64


class SampleDecoder:
    """Decodes a sample's views with one backend, timing each around the backend's calls only (open,
    decode, close). Opens every file per sample, as the real loaders do, unless the backend's
    settings say ``keep_open`` or the backend keeps a ``decoder_cache`` of its own (LeRobot's): then
    an LRU of open decoders is reused. With the backend's ``view_threads`` the views are decoded in
    parallel threads, one per camera (LeRobot's); each view's CPU is then its own thread's.
    LeRobot's: ``VideoDecoderCache`` in huggingface/lerobot@d0af05771fd4:src/lerobot/datasets/video_utils.py,
    the threads in ``DatasetReader._query_videos`` (src/lerobot/datasets/dataset_reader.py, same commit)."""

    def __init__(self, decoder: Backend):
        self.decoder = decoder
        self.cache_size = decoder.options.get("decoder_cache") or (OPEN_FILES if decoder.settings.keep_open else 0)
        self._open: OrderedDict[str, Handle] = OrderedDict()
        self._lock = threading.Lock()  # the cache, with view threads
        self._pool = ThreadPoolExecutor() if decoder.options.get("view_threads") else None  # a thread per view

    def __call__(self, requests: list[ViewRequest]) -> tuple[list[torch.Tensor], list[ViewTiming]]:
        if self._pool is None:  # process CPU time: the decoder's own threads count too
            views = [self._view(request, time.process_time) for request in requests]
        else:  # process CPU would count the other threads' views: each thread's own
            views = list(self._pool.map(lambda request: self._view(request, time.thread_time), requests))
        return [frames for frames, _ in views], [timing for _, timing in views]

    def _view(self, request: ViewRequest, cpu_clock: Callable[[], float]) -> tuple[torch.Tensor, ViewTiming]:
        cpu, start = cpu_clock(), time.perf_counter()
        with self._lock:
            handle = self._open.get(str(request.path)) if self.cache_size else None
        reused = handle is not None
        if handle is None:
            handle = self.decoder.open(request.path)
        opened = time.perf_counter()
        batch = handle.get_frames(request.file_indices)
        if batch.is_cuda:
            torch.cuda.synchronize(batch.device)
        decoded = time.perf_counter()
        if self.cache_size:
            self._keep(request, handle)
        else:
            handle.close()
        closed, cpu = time.perf_counter(), cpu_clock() - cpu
        return batch, ViewTiming(open_s=None if reused else opened - start, decode_s=decoded - opened,
                                 close_s=closed - decoded, cpu_s=cpu, frames=len(request.file_indices))

    def _keep(self, request: ViewRequest, handle: Handle) -> None:
        with self._lock:
            self._open[str(request.path)] = handle
            self._open.move_to_end(str(request.path))
            while len(self._open) > self.cache_size:
                self._open.popitem(last=False)[1].close()


class DecodeDataset(Dataset):
    """Item ``i`` = sample ``i`` of the pattern, decoded: {"frames": [per camera (N, H, W, 3)],
    "timings": [ViewTiming per camera]}. The decoder is made in the process that uses it (each
    DataLoader worker its own)."""

    def __init__(self, pattern: Pattern, backend_name: str, settings: Settings, length: int = 1_000_000):
        self.pattern, self.backend_name, self.settings, self.length = pattern, backend_name, settings, length
        self._decoder: SampleDecoder | None = None

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self._decoder is None:
            self._decoder = SampleDecoder(backend(self.backend_name, self.settings))
        frames, timings = self._decoder(self.pattern.sample(i))
        return {"frames": frames, "timings": timings}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_decoder": None}  # open decoders stay in their process


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack each camera's frames across the batch; keep the timings as they are."""
    return {"frames": [torch.stack(views) for views in zip(*(s["frames"] for s in samples), strict=True)],
            "timings": [s["timings"] for s in samples]}


@contextmanager
def worker_threads() -> Iterator[None]:
    """torch with one intra-op thread, as torch's DataLoader worker loop sets it up: for decoding in
    the main process (num_workers 0). Its default pool (a thread per core) would otherwise spin
    after every tensor operation of the sample pipeline, charging the decoders cores they never used."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def next_batch(batches: Iterator[Any], loader: DataLoader) -> Any:
    """The loader's next batch; without workers it is decoded here, with torch set up as a worker's."""
    if loader.num_workers:
        return next(batches)
    with worker_threads():
        return next(batches)


def make_loader(dataset: Dataset, *, batch_size: int, num_workers: int, prefetch_factor: int, pin_memory: bool,
                collate_fn: Callable[[list[Any]], Any] | None = collate) -> DataLoader:
    """A DataLoader as a training job makes one (``collate_fn`` None: torch's default collation)."""
    # workers are spawned, never forked: a fork copies the parent's threads' locks (the CPU sampler,
    # decoder and OpenMP pools), and a forked worker deadlocked on CPU and crashed under a CUDA parent
    return DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collate_fn,
                      prefetch_factor=prefetch_factor if num_workers else None,
                      pin_memory=pin_memory and torch.cuda.is_available(),
                      multiprocessing_context="spawn" if num_workers else None)


class Foreground:
    """A fixed stand-in for the training step, run in the main process while workers decode: on a
    GPU many tiny CUDA kernels (paced by how fast the CPU can launch them), on the CPU a fixed set
    of matmuls. How much its step time grows is what decoding steals from training."""

    def __init__(self, device: torch.device, kernels: int = 400, matmuls: int = 8, size: int = 256):
        self.device, self.kernels, self.matmuls = device, kernels, matmuls
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(size, size, generator=generator).to(device)

    def step(self) -> float:
        start = time.perf_counter()
        x = self.x
        if self.device.type == "cuda":
            for _ in range(self.kernels):
                x = x * 1.0001 + 1e-4
            torch.cuda.synchronize(self.device)
        else:
            for _ in range(self.matmuls):
                x = torch.tanh(x @ self.x)
        return time.perf_counter() - start
