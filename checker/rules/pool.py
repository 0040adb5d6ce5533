"""Worker pools that never outlive the check that started them.

Rules that split their work (cubic, exact) and `check-cert audit` compute in
forked worker processes.  A pool from `workers()` guarantees two things the
standard ProcessPoolExecutor does not:

- when the block using it ends by an exception (a worker's Rejected, a limit,
  Ctrl-C, or SIGTERM, which cli.main turns into KeyboardInterrupt), its workers
  are killed, not waited for: `shutdown(cancel_futures=True)` lets running
  tasks finish, which on a hostile certificate may be hours;
- a worker sent SIGTERM (by the pool above, or by `timeout` signalling the whole
  process group) kills its own pools' workers and exits at once; Ctrl-C, which
  the terminal sends to the whole group, is left to the main process, which
  then ends the workers itself.

A worker that dies still fails the computation (BrokenProcessPool: exit 2),
never passes it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

# multiprocessing and concurrent.futures are imported when a pool is made (start-up time:
# a check with --jobs 1 never makes one)
_LIVE: list[ProcessPoolExecutor] = []  # this process's open pools, newest last
KILL_GRACE_SECONDS = 2.0  # after SIGTERM, how long a worker may take before SIGKILL
TICK_SECONDS = 0.2  # map_in_order's tick while it waits


def can_fork() -> bool:
    """Forked workers inherit the parent's tables (intervals do not pickle)."""
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()


def map_in_order(jobs: int, fn, items, tick=None) -> list:
    """[fn(x) for x in items], computed in `jobs` forked workers.  The first exception
    (a worker's Rejected, a limit, a dead worker's BrokenProcessPool, Ctrl-C, SIGTERM)
    propagates and ends every worker.  tick: called every TICK_SECONDS while the parent
    waits (the rule's clock: the time limit and a terminal's progress line keep running)."""
    from concurrent.futures import wait

    with workers(jobs) as pool:
        futures = [pool.submit(fn, x) for x in items]
        out = []
        for f in futures:
            while tick is not None and not wait([f], timeout=TICK_SECONDS).done:
                tick()
            out.append(f.result())
        return out


@contextlib.contextmanager
def workers(n: int):
    """A ProcessPoolExecutor of `n` workers (forked where the platform can), whose
    workers are killed if the block raises.  (Futures are never cancelled on that
    path: Python 3.11's executor would then fail a cancelled future as well and print a
    traceback from its manager thread; the killed workers fail them instead.)"""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("fork" if can_fork() else None)
    pool = ProcessPoolExecutor(max_workers=n, mp_context=context, initializer=_worker_started)
    _LIVE.append(pool)
    try:
        yield pool
    except BaseException:
        _kill_workers(pool)
        raise
    finally:
        _LIVE.remove(pool)
        pool.shutdown(wait=True)  # after _kill_workers: nothing is left to wait for


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """SIGTERM every worker of `pool`, then SIGKILL any still alive after the grace period.
    (The executor keeps its processes in `_processes`; there is no public handle.)"""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for p in processes:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            p.terminate()
    for p in processes:
        with contextlib.suppress(OSError, ValueError, AttributeError, AssertionError):
            p.join(KILL_GRACE_SECONDS)
            if p.is_alive():
                p.kill()
                p.join()


def _worker_started() -> None:
    """Initializer of every worker: the parent's pools are not this process's to end;
    SIGTERM ends this worker (and its own workers); SIGINT is the parent's to handle."""
    _LIVE.clear()
    signal.signal(signal.SIGTERM, _worker_terminated)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _worker_terminated(signum, frame) -> None:
    for pool in reversed(_LIVE):
        _kill_workers(pool)
    os._exit(128 + signum)
