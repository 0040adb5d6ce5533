"""The Dask side: a client on a local or existing cluster, and the job loop.

Jobs are whole units (train one model, the facts of one model, one strategy
on one model) run by generator.zoo.jobs; the loop submits them, hands each
result to its callback the moment it arrives (which caches it), may submit
follow-up jobs, and retries a job that failed or whose worker died exactly
once, recording why.  A job that fails twice is returned to the caller, to be
reported -- never a silent gap.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

LOOPBACK = "127.0.0.1"
RETRIES = 1  # a failed job is run once more
# With 0, the scheduler reports a task whose worker died at once (as
# KilledWorker) instead of silently rescheduling it; the loop's own retry
# then records the death.
ALLOWED_FAILURES = 0


@dataclass
class Job:
    """One unit of work.  on_result(result, job) returns follow-up jobs (or None)."""

    name: str  # unique, human-readable: "cubic on seed3.pt"
    stage: str  # "train", "facts" or "certify": one progress bar each
    fn: Callable
    args: tuple
    on_result: Callable[[dict, Job], list[Job] | None]
    attempts: int = 0
    failures: list[str] = field(default_factory=list)  # why earlier attempts failed


@contextmanager
def dask_client(scheduler: str | None = None, workers: int | None = None) -> Iterator:
    """A dask.distributed Client.

    scheduler None: start a LocalCluster of `workers` (default: all cores)
    single-threaded worker processes listening on 127.0.0.1 only (the
    scheduler's HTTP endpoint too, on a free port), stopped on exit.  Otherwise connect to `tcp://HOST:PORT`.
    """
    import dask
    from dask.distributed import Client, LocalCluster

    if scheduler is not None:
        if not scheduler.startswith("tcp://"):
            raise ValueError(f"--scheduler {scheduler!r}: expected tcp://HOST:PORT")
        with Client(scheduler, timeout="30s") as client:
            yield client
        return
    n = workers or os.cpu_count() or 1
    with dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES}):
        with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host=LOOPBACK,
                          dashboard_address=f"{LOOPBACK}:0",
                          silence_logs=logging.ERROR) as cluster:
            with Client(cluster) as client:
                yield client


def describe(err: BaseException) -> str:
    """One line naming what went wrong (a dead worker shows as KilledWorker)."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".strip()


def _position(bar) -> int:
    """The screen line of a tqdm bar below the first one (0 for the first)."""
    return abs(getattr(bar, "pos", 0))


class JobLoop:
    """Run jobs and their follow-ups on a client, with one retry each."""

    def __init__(self, client, progress: bool = True, retries: int = RETRIES):
        self.client = client
        self.retries = retries
        self.progress = progress
        self.bars: dict[str, object] = {}
        self.failed: list[Job] = []
        self.retried: list[Job] = []
        self.completed = 0

    def run(self, jobs: list[Job]) -> list[Job]:
        """Run to completion; return the jobs that failed every attempt."""
        from dask.distributed import as_completed

        try:
            self._run(jobs, as_completed())
        finally:  # also on Ctrl-C: the lines after the run must start on a clean screen
            self.close_bars()
        return self.failed

    def _run(self, jobs: list[Job], queue) -> None:
        pending: dict[str, Job] = {}
        for job in jobs:
            self._submit(job, queue, pending)
        for future in queue:
            job = pending.pop(future.key)
            try:
                result = future.result()
            except Exception as err:  # the job raised, or its worker died
                self._failed_attempt(job, describe(err), queue, pending)
                continue
            finally:
                future.release()
            self._bar(job.stage).update(1)
            self._bar("all").update(1)
            self.completed += 1
            for follow in job.on_result(result, job) or []:
                self._submit(follow, queue, pending)

    def close_bars(self) -> None:
        """Erase every bar, the lowest on the screen first: each one's line is then
        cleared where it was drawn, and the cursor ends where the first bar began,
        so the summary printed next is not overwritten by bar residue."""
        for bar in sorted(self.bars.values(), key=_position, reverse=True):
            bar.close()
        self.bars.clear()

    def _submit(self, job: Job, queue, pending: dict) -> None:
        job.attempts += 1
        future = self.client.submit(job.fn, *job.args, pure=False,
                                    key=f"{job.stage}-{job.name}-{job.attempts}-{id(job)}")
        pending[future.key] = job
        queue.add(future)
        if job.attempts == 1:
            for stage in (job.stage, "all"):
                bar = self._bar(stage)
                bar.total = (bar.total or 0) + 1
                bar.refresh()

    def _failed_attempt(self, job: Job, why: str, queue, pending: dict) -> None:
        job.failures.append(why)
        from tqdm import tqdm

        # tqdm.write: printed above the bars, which are redrawn below it
        tqdm.write(f"certify-zoo: {job.name}: attempt {job.attempts} failed ({why})"
                   + ("; retrying" if job.attempts <= self.retries else ""), file=sys.stderr)
        if job.attempts <= self.retries:
            self.retried.append(job)
            self._submit(job, queue, pending)
        else:
            self.failed.append(job)
            self._bar(job.stage).update(1)
            self._bar("all").update(1)

    def _bar(self, stage: str):
        if stage not in self.bars:
            from tqdm import tqdm

            position = len(self.bars)
            self.bars[stage] = tqdm(total=0, desc=stage if stage != "all" else "all jobs",
                                    position=position, file=sys.stderr, unit="job",
                                    disable=None if self.progress else True,
                                    leave=False)  # the summary line reports the totals
        return self.bars[stage]
