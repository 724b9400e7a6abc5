"""The innermost loop of the per-iteration engine (loop.py): a stretch of iterations of the same
decoding rows at their usual verify lengths, without prefill, until a row finishes or an
iteration ends at or after the next arrival.

Two implementations with one contract: `steady_stretch_py` here, and stretch_kernel.pyx, the
same loop in C (built by setup.py when it can be; native.py says when a build is used).
`steady_stretch` is the compiled one when it is in use, else the Python one. Both give the same
results bit for bit (tests/sim/test_native.py): integer arithmetic, and the iteration time
rounded half to even as Python's round() does.
"""
from __future__ import annotations

from .native import compiled


def steady_stretch_py(tok: list[bytes], first: list[int], owed: list[int], r: int, it: int,
                      now: int, t_arr: int, base: float, context_ns: float, kv_sum: int):
    """Run iterations it, it+1, ... of rows 0..r-1 starting at `now`.

    tok[k][i]: tokens row k emits in its i-th decode step (it - first[k]); owed[k]: tokens it
    still owes (updated in place; may go below 0 on the last step). An iteration lasts
    round(base + context_ns * kv_sum) ns, and kv_sum grows by what it emitted.
    Returns (it, now, end, kv_sum, emitted, done) of the last iteration run: its index, start
    and end, kv_sum before it, the tokens it emitted, and the rows it finished (None if none;
    then end >= t_arr)."""
    done = None
    while True:
        emitted = 0
        for k in range(r):
            e = tok[k][it - first[k]]
            left = owed[k] - e
            owed[k] = left
            emitted += e
            if left <= 0:
                if done is None:
                    done = []
                done.append(k)
        end = now + round(base + context_ns * kv_sum if context_ns else base)
        if done is not None or end >= t_arr:
            return it, now, end, kv_sum, emitted, done
        kv_sum += emitted
        it += 1
        now = end


def _select():
    kernel = compiled("_stretch_kernel_native")
    return kernel.steady_stretch if kernel is not None else steady_stretch_py


steady_stretch = _select()
