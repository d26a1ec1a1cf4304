"""Ctrl-C and SIGTERM as one KeyboardInterrupt that is never lost.

Python runs a signal's handler at the next bytecode the main thread executes; when that is inside a
callback whose exceptions Python only reports (logging's at-fork hook as ``subprocess.Popen`` forks a
point's process, a ``__del__``), the KeyboardInterrupt is printed as "Exception ignored" and the sweep
goes on. So the handler also notes the signal, and the places that spawn or start a point ask."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_noted = False  # a signal arrived since the innermost ``signals_interrupt`` began, and it has not ended


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM (what CI runners and Slurm send) raise KeyboardInterrupt: the point's processes
    killed, the scratch folder removed, the manifest interrupted, the resume hint said."""
    global _noted
    if threading.current_thread() is not threading.main_thread():  # only the main thread takes signals
        yield
        return

    def interrupt(signum, frame):
        global _noted
        _noted = True
        raise KeyboardInterrupt

    outer, _noted = _noted, False
    # a SIGINT ignored from the start (a job a shell put in the background) stays ignored
    taken = [sig for sig in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(sig) is not signal.SIG_IGN]
    previous = {sig: signal.signal(sig, interrupt) for sig in taken}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _noted = outer  # what came inside ends with it: a point started outside (measure called alone) runs


def raise_if_swallowed() -> None:
    """Raise the KeyboardInterrupt of a signal that came but whose raise a callback swallowed (a raise
    that propagated ended the sweep, so nothing asks again)."""
    if _noted:
        raise KeyboardInterrupt
