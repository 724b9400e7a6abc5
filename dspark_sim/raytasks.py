"""Tasks on Ray: a local instance started (and shut down) for the purpose, results as they
finish. Used by the sweep executors and the partitioned replay (sim/cluster/partition.py)."""
from __future__ import annotations

import contextlib
from typing import Any, Iterable, Iterator

from .errors import InputError


@contextlib.contextmanager
def ray_session(workers: int, address: str | None = None) -> Iterator[Any]:
    """The `ray` module, initialised: a local instance (127.0.0.1, `workers` CPUs, no
    dashboard) unless an address is given or Ray is already running; what this starts is shut
    down on leaving."""
    try:
        import ray
    except ImportError:
        raise InputError("Ray is not installed; pip install 'dspark-sim[ray]' (or ray)",
                         field="executor") from None
    started = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
                     configure_logging=False, _node_ip_address="127.0.0.1")
        started = True
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def ray_results(ray, remote, jobs: Iterable[tuple[Any, tuple]],
                max_pending: int | None = None) -> Iterator[tuple[Any, Any]]:
    """Submit remote(*args) for each (key, args) of `jobs`, at most `max_pending` at a time
    (jobs are taken from the iterable only when submitted, so large arguments are built and
    stored a few at a time); yield (key, result) as each finishes; cancel what is left after
    an error or an interrupt."""
    todo = iter(jobs)
    pending: dict[Any, Any] = {}

    def top_up() -> None:
        while max_pending is None or len(pending) < max_pending:
            job = next(todo, None)
            if job is None:
                return
            pending[remote.remote(*job[1])] = job[0]

    try:
        top_up()
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                key = pending.pop(ref)
                result = ray.get(ref)
                top_up()
                yield key, result
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
