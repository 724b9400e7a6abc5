"""Tasks on Ray: a local instance started (and shut down) for the purpose, results as they
finish. Used by the sweep executors and the partitioned replay (sim/partition.py)."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

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


def ray_results(ray, remote, jobs: dict[Any, tuple]) -> Iterator[tuple[Any, Any]]:
    """Submit remote(*args) for each job key; yield (key, result) as each finishes; cancel
    what is left after an error or an interrupt."""
    pending = {remote.remote(*args): key for key, args in jobs.items()}
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                yield pending.pop(ref), ray.get(ref)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
