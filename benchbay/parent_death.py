"""A child process that dies with its parent: a point's process, torchrun's ranks and a command
point's command, so that a SIGKILLed runner leaves nothing running."""

import ctypes
import signal


def die_with_parent() -> None:
    """In a child process: SIGKILL it when its parent dies (Linux only; ranks under torchrun call it
    too, torchrun being their parent)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
