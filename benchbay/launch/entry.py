"""A point's process: ``python -m benchbay.launch.entry SPEC.json RESULT.json`` runs the worker
(benchbay.launch.worker). The worker imports torch, seconds on a GPU machine; a command point's
command is started first, here, so that its own start-up (its interpreter, its torch) runs beside
those imports rather than after them, and the point costs about the command's start-up plus its steps."""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

from benchbay.launch.base import PointSpec, rank_env
from benchbay.workloads import registry
from benchbay.workloads.command import Command


def started_command(spec: PointSpec) -> Command | None:
    """A command point's ``Command``, started; None where the worker must start it itself: another
    workload, a profiled point (the probe's profile is set up first), a rank under torchrun, a point
    its own check refuses, or a command that could not start (the worker's try says why)."""
    if spec.profile or "TORCHELASTIC_RUN_ID" in os.environ:
        return None
    try:
        # by name first: another workload's module is the worker's to import, under its stack-dump deadline
        if spec.workload != Command.name or registry.resolve(spec.workload) is not Command:
            return None
        # the device as a command sees it, by its type; the worker puts the torch device in its place
        command = Command(spec.params, spec.knobs, SimpleNamespace(type=spec.device))
        if command.skip_reason() is None:
            rank_env()  # the variables the worker would have set before starting it
            command.start()
            return command
    except Exception:  # noqa: BLE001 - the worker builds and starts it again, and records what failed
        pass
    return None


def main(argv: list[str] | None = None) -> int:
    argv = argv or sys.argv[1:]
    # a point stopped by a Ctrl-C or a call's time limit is asked for its stacks first (process.STACKS_SIGNAL);
    # unblocked, as a mask the launching shell or supervisor blocked it in is inherited (the H100 run
    # -203934-e3d9 got no stacks)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
    command = started_command(PointSpec.from_json(json.loads(Path(argv[0]).read_text())))
    from benchbay.launch import worker  # torch, while the command starts

    return worker.main(argv, command)


if __name__ == "__main__":
    sys.exit(main())
