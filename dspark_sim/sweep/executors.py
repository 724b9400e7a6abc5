"""Run sweep points in parallel: local processes (default) or a Ray cluster; results are handed
back one by one as they finish (so the caller can cache each at once), with a progress bar.

Local workers are forked (Linux; spawned elsewhere): they inherit the loaded package and need
no `if __name__ == "__main__"` guard in the calling script.
"""
from __future__ import annotations

import contextlib
import multiprocessing
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterator

from ..errors import InputError
from ..raytasks import ray_results, ray_session
from .point import run_point
from .spec import Point

EXECUTORS = ("local", "ray")
OnResult = Callable[[Point, dict[str, Any]], None]


@contextlib.contextmanager
def _progress(total: int, show: bool, what: str) -> Iterator[Callable[[str], None]]:
    """A rich progress bar on stderr (or nothing); yields advance(label)."""
    if not show or total == 0:
        yield lambda label: None
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[last]}"))
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(what, total=total, last="")
        yield lambda label: bar.update(task, advance=1, last=label)


def run_points(points: list[Point], on_result: OnResult, *, workers: int = 1,
               executor: str = "local", show_progress: bool = False, ray_address: str | None = None,
               what: str = "points") -> None:
    """Simulate every point; call on_result(point, metrics) as each one finishes."""
    if executor not in EXECUTORS:
        raise InputError(f"unknown executor {executor!r}; choose {' or '.join(EXECUTORS)}",
                         field="executor")
    if workers < 1:
        raise InputError(f"must be >= 1, got {workers}", field="workers")
    if not points:
        return
    if executor == "ray":
        results = _ray_results(points, workers, ray_address)
    elif workers == 1 or len(points) == 1:
        results = ((p, run_point(p)) for p in points)
    else:
        results = _process_results(points, workers)
    with _progress(len(points), show_progress, what) as advance:
        for point, metrics in results:
            on_result(point, metrics)
            advance(point.label())


def _process_results(points: list[Point], workers: int) -> Iterator[tuple[Point, dict[str, Any]]]:
    """A process pool; every point is submitted (and the workers forked) before this returns,
    i.e. before a progress bar starts its thread. Yields results as they finish."""
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    pool = ProcessPoolExecutor(max_workers=min(workers, len(points)), mp_context=context)
    pending = {pool.submit(run_point, p): p for p in points}

    def results() -> Iterator[tuple[Point, dict[str, Any]]]:
        try:
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    yield pending.pop(future), future.result()
        finally:
            # after an error or an interrupt: drop queued points, do not wait for running ones
            pool.shutdown(wait=False, cancel_futures=True)

    return results()


def _ray_results(points: list[Point], workers: int, address: str | None
                 ) -> Iterator[tuple[Point, dict[str, Any]]]:
    """Ray tasks, one per point, on a local Ray instance with `workers` CPUs unless an address
    is given (then every node needs this package and the input files at the same paths)."""
    session = ray_session(workers, address)
    ray = session.__enter__()
    remote = ray.remote(num_cpus=1)(run_point)

    def results() -> Iterator[tuple[Point, dict[str, Any]]]:
        try:
            for i, metrics in ray_results(ray, remote, ((i, (p,)) for i, p in enumerate(points))):
                yield points[i], metrics
        finally:
            session.__exit__(None, None, None)

    return results()
