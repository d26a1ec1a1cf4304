"""benchbay: declarative benchmarking and profiling of large robot-learning training steps."""

__version__ = "0.1.0"
