"""Points run as Slurm jobs through submitit (``SlurmLauncher``).

The job runs the point on its node(s) exactly as ``benchbay.launch.process`` runs it here (a
fresh process, or torchrun for several GPUs, under the point's timeout; one torchrun per node
with a c10d rendezvous on the job's first node), and the ranks' results of every node come back
merged into the outcome ``process.run_point`` returns, plus ``extra.executor`` (cluster, job id)
and ``env`` (the fingerprint of the job's first node, which may differ from the submitting host).

``params`` (``--executor-param``): ``cluster`` (``slurm``, or ``local`` / ``debug`` to try it out; default:
what submitit detects), ``folder`` (submitit's pickles and logs; it must be on a filesystem the
nodes share; default WORKDIR/submitit), and any parameter of submitit's ``AutoExecutor``
(``slurm_partition``, ``slurm_account``, ``slurm_qos``, ``slurm_setup``, ``cpus_per_task``,
``mem_gb``...). Defaults: one task per node, ``nodes`` = launch.nnodes, ``gpus_per_node`` =
launch.nproc unless the point runs on the CPU, ``cpus_per_task`` = 8 per GPU (1 per CPU
process), a time limit of the point's timeout plus start-up margin. For steady timings ask for
whole nodes (``slurm_exclusive: true``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import submitit

from benchbay.collect.env import fingerprint
from benchbay.launch import process
from benchbay.launch.base import DeviceType, Launch, Outcome, PointSpec
from benchbay.launch.process import Finished
from benchbay.record import Status
from benchbay.store import refuse_links

#: the job's own start-up and teardown (imports, rendezvous) beyond the point's timeout
JOB_MARGIN_S = 300
#: CPUs asked per GPU (Slurm gives a task one CPU unless told; data loading and the ranks need more)
CPUS_PER_GPU = 8
#: how Slurm job states that leave no result map onto point statuses (anything else: crash)
JOB_STATES = {"TIMEOUT": Status.TIMEOUT, "DEADLINE": Status.TIMEOUT, "OUT_OF_MEMORY": Status.OOM}


@dataclass(frozen=True)
class SlurmLauncher:
    """Each point a Slurm job (of ``launch.nnodes`` nodes), submitted and waited for."""

    launch: Launch = field(default_factory=Launch)
    params: dict[str, Any] = field(default_factory=dict)  # submitit's (module docstring)

    def device(self, requested: str) -> DeviceType:
        # on a login node "auto" must not be resolved from the host's own devices
        return "cpu" if requested == "cpu" else "cuda"

    @contextmanager
    def scratch(self, run: Path) -> Iterator[Path]:
        """Beside the run, and kept: the nodes must see the points' folders (never through a link)."""
        yield refuse_links(run / "scratch", run.parent.parent)

    def run(self, spec: PointSpec, workdir: Path) -> Outcome:
        return run_point_submitit(spec, workdir, self.launch, self.params)


def job_parameters(spec: PointSpec, launch: Launch, params: dict[str, Any], name: str = "benchbay") -> dict[str, Any]:
    """submitit parameters of the point's job: the defaults (module docstring), then ``params``."""
    cuda = spec.device != "cpu"
    defaults = {"nodes": launch.nnodes, "tasks_per_node": 1, "gpus_per_node": launch.nproc if cuda else 0,
                "cpus_per_task": launch.nproc * (CPUS_PER_GPU if cuda else 1),
                "timeout_min": math.ceil((spec.timeout + JOB_MARGIN_S) / 60), "name": name}
    return {**defaults, **params}


def run_point_submitit(spec: PointSpec, workdir: Path, launch: Launch, params: dict[str, Any]) -> Outcome:
    """Submit the point, wait for it, return its merged outcome; never raises for a failed point
    or job. KeyboardInterrupt cancels the job and propagates."""
    params = dict(params)
    cluster = params.pop("cluster", None)
    executor = submitit.AutoExecutor(folder=Path(params.pop("folder", workdir / "submitit")), cluster=cluster)
    executor.update_parameters(**job_parameters(spec, launch, params, name=f"benchbay-{workdir.name}"))
    job = executor.submit(run_on_node, spec, workdir, launch, os.getcwd())
    executor_info = {"cluster": executor.cluster, "job_id": str(job.job_id)}
    try:
        nodes: list[tuple[Finished, dict[str, Any]]] = job.results()
    except KeyboardInterrupt:
        job.cancel(check=False)
        raise
    except Exception as exc:  # the job ended without a result: cancelled, pre-empted, time limit, node lost
        return _job_failure(job, exc, executor_info)
    outcome = process.merge(_combine([finished for finished, _ in nodes]), spec.timeout, launch.world_size)
    outcome.extra["executor"] = executor_info
    outcome.env = nodes[0][1]
    return outcome


def run_on_node(spec: PointSpec, workdir: Path, launch: Launch, cwd: str) -> tuple[Finished, dict[str, Any]]:
    """In the job, once per node: this node's ranks of the point, and this node's fingerprint."""
    os.chdir(cwd)  # the workers import from where the suite was submitted (user workloads, fixtures)
    if launch.nnodes > 1:
        job = submitit.JobEnvironment()
        launch = node_launch(launch, job.node, job.hostnames)
        workdir = Path(workdir) / f"node{job.node}"  # each node's result files apart
    return process.run_ranks(spec, Path(workdir), launch), fingerprint(cwd)


def node_launch(launch: Launch, node: int, hostnames: list[str]) -> Launch:
    """The launch of one node of a multi-node job: its rank among the nodes, and the rendezvous
    on the job's first node (at the port of ``launch.rdzv_endpoint``)."""
    port = launch.rdzv_endpoint.rsplit(":", 1)[-1]
    return replace(launch, node_rank=node, rdzv_endpoint=f"{hostnames[0]}:{port}")


def _combine(nodes: list[Finished]) -> Finished:
    """Every node's ranks as one point: all results, the first failing exit code, any timeout."""
    codes = [n.returncode for n in nodes]
    return Finished(results=[r for n in nodes for r in n.results],
                    returncode=next((c for c in codes if c), codes[0]),
                    timed_out=any(n.timed_out for n in nodes),
                    tail="\n".join(n.tail for n in nodes)[-3000:],
                    stall="; ".join(n.stall for n in nodes if n.stall))


def _job_failure(job: submitit.Job, exc: Exception, executor_info: dict[str, Any]) -> Outcome:
    try:
        state = job.state
    except Exception:  # the scheduler could not be asked
        state = "UNKNOWN"
    first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    return Outcome(status=JOB_STATES.get((state.split() or ["UNKNOWN"])[0], Status.CRASH),
                   reason=f"job {job.job_id} ended {state} without a result: {first_line}",
                   extra={"executor": {**executor_info, "state": state}, "log_tail": str(exc)[-3000:]})
