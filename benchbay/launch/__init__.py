"""Launchers: how a sweep point gets its own process (or torchrun process group)."""
