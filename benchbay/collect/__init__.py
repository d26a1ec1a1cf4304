"""Collectors: what a worker measures around its steps (time, memory, system load, environment).

One protocol (optimum-benchmark's trackers): ``start()`` before the window a collector measures,
``stop()`` after it (idempotent; entering and leaving it as a context manager does the same), then
``figures(window)``: typed figures of that window, which the worker merges into the record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Window:
    """What the worker knows of the window the collectors measured."""

    samples: int  # samples trained (or decoded) over it


@dataclass
class Figures:
    """A collector's figures: ``metrics`` (one number each, by the names of ``record.FIGURES``),
    ``series`` (one value per step or sample) and ``extra`` (anything else a record keeps)."""

    metrics: dict[str, Any] = field(default_factory=dict)
    series: dict[str, list[Any]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def __or__(self, other: Figures) -> Figures:
        """Both, ``other``'s figure where both have one."""
        return Figures({**self.metrics, **other.metrics}, {**self.series, **other.series},
                       {**self.extra, **other.extra})


class Collector:
    """Measures nothing: the base of every collector, and the stand-in for one not asked for."""

    def start(self) -> None:
        """Begin the window."""

    def stop(self) -> None:
        """End the window; a collector stopped twice, or never started, stops without error."""

    def figures(self, window: Window) -> Figures:
        return Figures()

    def __enter__(self) -> Collector:
        self.start()
        return self

    def __exit__(self, *exc: object) -> bool:
        self.stop()
        return False
