"""Collectors: what a worker measures around its steps (time, memory, system load, environment)."""
