"""A child process that dies with its parent: a point's process, torchrun's ranks and a command
point's command, so that a SIGKILLed runner leaves nothing running; and orphans that come back to
the runner rather than to init, so that it can find them."""

import ctypes
import signal


def die_with_parent() -> None:
    """In a child process: SIGKILL it when its parent dies (Linux only; ranks under torchrun call it
    too, torchrun being their parent)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def adopt_orphans() -> None:
    """In the runner: a descendant whose parent died is re-parented to this process, not to init
    (Linux only). A daemon a step double-forked, in a session of its own with its environment
    cleared, is then still this process's descendant when its point is killed."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    except OSError:
        pass
