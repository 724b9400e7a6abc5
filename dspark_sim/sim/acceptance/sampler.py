"""Acceptance per decoding step: how many drafts would survive, and the scheduler's confidences.

A simulated request's t-th decode step has a fixed "accepted run" A (drafts that survive
when all gamma are verified); verifying l drafts accepts min(A, l). The runs are a function
of (seed, request, step) only, so every policy and both engines see the same draws.

- parametric: A = #{j : U < a_j} with one uniform U per step and a_j = prod_{i<=j} alpha_i,
  i.e. the run is drawn from the per-position conditional rates; confidences = the rates, or,
  with a task's `confidence_correlation` rho > 0, what a calibrated confidence head that sees a
  noisy signal of the step's run would say: with Z = Phi^-1(U) and the step's signal
  S = rho Z + sqrt(1 - rho^2) E (E standard normal from a second uniform stream), the scheduler's
  survival of position j is P(U < a_j | S) = Phi((Phi^-1(a_j) - rho S) / sqrt(1 - rho^2)).
  The runs, and so the acceptance, are the same as at rho = 0 (U is not changed); only what
  the confidences know about them is. rho = 0 gives the rates, rho -> 1 an oracle.
- empirical: the request walks one measured request's steps in order (cycling when it needs
  more); which measured request: the one measured on this very request when the profile names
  the trace's request ids (`id`, a replay of the trace it was measured on), else one drawn from
  the seed. Confidences are the measured ones
  when the profile has them, else the task's measured conditional acceptance. A step whose
  measured `drafted` is below gamma (an n-gram drafter found a shorter match, or none)
  verifies at most that many drafts; only the reference engine applies this cap.
"""
from __future__ import annotations

import copy

import numpy as np
from scipy.special import ndtr, ndtri

from ...profiles.acceptance import AcceptanceProfile, TaskAcceptance
from ..core.rules import survivals
from .uniforms import UniformStream


ROW_TABLE_LIMIT = 1 << 22
_SEQ_BLOCK = 1024      # requests whose parametric runs `sequence` draws at once


class _ByTask:
    """`mean[task_index]` without materialising it: indexing by rows gives its rows."""

    def __init__(self, mean: np.ndarray, task_index: np.ndarray) -> None:
        self.mean, self.task_index = mean, task_index

    def __getitem__(self, rows):
        return self.mean[self.task_index[rows]]


class AcceptanceSampler:
    """Accepted runs and survivals for the requests of one trace under one acceptance profile.

    Lookups take request indices `rows` (R,) and decode-step indices `steps` (R, M); a step
    past a request's last one (or -1) returns some valid value that callers mask out.
    `subset(rows)` serves some of the requests with the draws they get in the whole trace
    (a replica's partition, sim/cluster/partition.py).
    """

    _PER_REQUEST = ("task_index", "_param", "_slots", "_offset", "_emp_start", "_emp_len")

    def __init__(self, profile: AcceptanceProfile, tasks: np.ndarray, output_tokens: np.ndarray,
                 seed: int, pad: int = 0, request_ids=None) -> None:
        self.gamma = g = profile.gamma
        specs: list[TaskAcceptance] = []
        index_of: dict[str, int] = {}
        names = list(map(str, tasks.tolist() if isinstance(tasks, np.ndarray) else tasks))
        for name in sorted(set(names)):
            spec = profile.for_task(name)
            # Tasks that fall back to the same profile task share one index.
            found = next((i for i, s in enumerate(specs) if s is spec), None)
            if found is None:
                specs.append(spec)
                found = len(specs) - 1
            index_of[name] = found
        self.task_index = np.array(list(map(index_of.__getitem__, names)), dtype=np.int64)
        n = len(self.task_index)
        mean = np.stack([survivals(s.conditional_accept(g)) for s in specs])
        self.mean_survival_by_task = mean
        self._neg_surv_by_task = [-row for row in mean]
        self._neg_uniform: np.ndarray | None = None
        rho = np.array([s.confidence_correlation if s.kind == "parametric" else 0.0 for s in specs])
        self._rho_by_task = rho
        self.static_confidence = not any(s.kind == "empirical" and any(r.confidence is not None
                                                                       for r in s.requests)
                                         for s in specs) and not (rho > 0).any()
        kind_param = np.array([s.kind == "parametric" for s in specs])
        self._param = kind_param[self.task_index]
        # Parametric: one uniform per possible decode step (a request makes <= output - 1).
        slots = np.maximum(np.asarray(output_tokens, dtype=np.int64) - 1, 0)
        self._slots = slots
        self._offset = np.concatenate([[0], np.cumsum(slots)[:-1]]).astype(np.int64) if n else slots
        self._signal = None        # the confidence signals' noise (a task with rho > 0)
        if self._param.any():      # drawn lazily (uniforms.py), the same values as one draw
            stream = UniformStream([seed, 0xACC], int(slots.sum()) + pad + 1)
            self._uniform = stream.whole if stream.whole is not None else stream
            rng = stream.generator_after()
            if (rho > 0).any():
                noise = UniformStream([seed, 0xC0F], stream.total)
                self._signal = noise.whole if noise.whole is not None else noise
        else:
            self._uniform, rng = np.zeros(1), np.random.default_rng([seed, 0xACC])
        self._seq_blocks: dict[int, tuple[bytes, list[int]]] = {}
        self._lists: tuple[list[bool], list[int], list[int]] | None = None   # for `sequence`
        self._emp_bytes: bytes | None = None
        # Empirical: all measured requests of all tasks end to end; each request picks one.
        starts, lengths, acc, surv, capped = [], [], [], [], []
        own: dict[tuple[int, str], int] = {}      # (task, measured request id) -> its record
        first = np.zeros(len(specs), dtype=np.int64)
        count = np.zeros(len(specs), dtype=np.int64)
        pos = 0
        for k, spec in enumerate(specs):
            first[k] = len(starts)
            if spec.kind != "empirical":
                continue
            count[k] = len(spec.requests)
            for req in spec.requests:
                if getattr(req, "request_id", None) is not None:
                    own[(k, req.request_id)] = len(starts)
                conf = req.confidence if req.confidence is not None else \
                    np.broadcast_to(spec.conditional_accept(g), (len(req.accepted), g))
                starts.append(pos)
                lengths.append(len(req.accepted))
                acc.append(req.accepted)
                drafted = getattr(req, "drafted", None)
                capped.append(np.full(len(req.accepted), g, np.int64) if drafted is None
                              else np.asarray(drafted, dtype=np.int64))
                surv.append(survivals(conf))
                pos += len(req.accepted)
        self._emp_acc = np.concatenate(acc).astype(np.int64) if acc else np.zeros(1, np.int64)
        self._emp_surv = np.concatenate(surv) if surv else np.zeros((1, g))
        # drafts the drafter proposed at each measured step (an n-gram drafter may propose
        # fewer than gamma, or none); None when every step drafted gamma
        self._emp_drafted = np.concatenate(capped) if capped else np.full(1, g, np.int64)
        self.caps_drafts = bool((self._emp_drafted < g).any())
        pick = first[self.task_index] + (rng.random(n) * count[self.task_index]).astype(np.int64)
        if own and request_ids is not None:
            for row, rid in enumerate(map(str, request_ids)):
                pick[row] = own.get((int(self.task_index[row]), rid), pick[row])
        starts_a = np.asarray(starts + [0], dtype=np.int64)
        lengths_a = np.asarray(lengths + [1], dtype=np.int64)
        emp = ~self._param
        self._emp_start = np.where(emp, starts_a[np.where(emp, pick, -1)], 0)
        self._emp_len = np.where(emp, lengths_a[np.where(emp, pick, -1)], 1)
        self._set_rows()

    def _set_rows(self) -> None:
        self._all_param = bool(self._param.all())
        # each request's task survivals (also the parametric confidences); a long trace
        # looks them up through the task instead of holding gamma floats per request
        self._row_surv = self.mean_survival_by_task[self.task_index] \
            if len(self.task_index) * self.gamma <= ROW_TABLE_LIMIT \
            else _ByTask(self.mean_survival_by_task, self.task_index)

    def subset(self, rows: np.ndarray) -> "AcceptanceSampler":
        """A sampler for requests `rows` of this one's trace, renumbered 0..len(rows)-1, each
        with the draws it has here."""
        part = copy.copy(self)
        rows = np.asarray(rows, dtype=np.int64)
        for name in self._PER_REQUEST:
            setattr(part, name, getattr(self, name)[rows])
        part._seq_blocks = {}      # blocks of the renumbered requests (the copy would share ours)
        part._lists = None
        part._set_rows()
        return part

    def accepted(self, rows: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """(R, M) accepted runs of requests `rows` at decode steps `steps` (R, M)."""
        if self._all_param:
            u = self._uniform[self._offset[rows][:, None] + steps]
            return (u[:, :, None] < self._row_surv[rows][:, None, :]).sum(axis=2)
        param = self._param[rows][:, None]
        u = self._uniform[np.where(param, self._offset[rows][:, None] + steps, 0)]
        drawn = (u[:, :, None] < self._row_surv[rows][:, None, :]).sum(axis=2)
        idx = self._emp_start[rows][:, None] + steps % self._emp_len[rows][:, None]
        return np.where(param, drawn, self._emp_acc[idx])

    def drafted(self, rows: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """(R, M) drafts proposed at those decode steps (gamma for parametric tasks): a step
        verifies at most this many (formats.md, empirical `drafted`)."""
        idx = self._emp_start[rows][:, None] + steps % self._emp_len[rows][:, None]
        return np.where(self._param[rows][:, None], self.gamma, self._emp_drafted[idx])

    def row_survival(self, rows: np.ndarray) -> np.ndarray:
        """(R, gamma) survivals from each request's task: its parametric rates or measured mean
        conditional acceptance (the confidences when the profile has no per-step ones)."""
        return self._row_surv[rows]

    def survival(self, rows: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """(R, M, gamma) survivals of each request's decode steps (measured confidences, or a
        parametric task's confidences with its signal of the step's run)."""
        idx = self._emp_start[rows][:, None] + steps % self._emp_len[rows][:, None]
        param = self._param[rows][:, None, None]
        surv = self._row_surv[rows][:, None, :]
        if self._signal is not None:
            surv = self._signalled(rows, steps, surv)
        return np.where(param, surv, self._emp_surv[idx])

    def _signalled(self, rows: np.ndarray, steps: np.ndarray, mean: np.ndarray) -> np.ndarray:
        """(R, M, gamma) P(U < a_j | S) for parametric steps (module docstring); rho = 0 rows
        keep their rates."""
        rho = self._rho_by_task[self.task_index[rows]][:, None, None]
        slot = np.where(self._param[rows][:, None], self._offset[rows][:, None] + steps, 0)
        eps = 1e-12
        z = ndtri(np.clip(self._uniform[slot], eps, 1 - eps))[:, :, None]
        noise = ndtri(np.clip(self._signal[slot], eps, 1 - eps))[:, :, None]
        rest = np.sqrt(1.0 - rho * rho)
        signal = rho * z + rest * noise
        a = np.broadcast_to(mean, signal.shape[:2] + mean.shape[2:])
        given = ndtr((ndtri(np.clip(a, eps, 1 - eps)) - rho * signal) / rest)
        return np.where(rho > 0, given, a)

    def sequence(self, rid: int) -> tuple[bytes, int]:
        """A request's accepted runs as bytes and their period: step s has run seq[s % period]
        (the same values `accepted` gives). Parametric runs are drawn for a block of
        `_SEQ_BLOCK` consecutive requests at a time (a few blocks are kept)."""
        if self._lists is None:
            self._lists = (self._param.tolist(), self._slots.tolist(), self._offset.tolist())
        param, slots, offset = self._lists
        if param[rid]:
            n = slots[rid]
            if n == 0:
                return self._runs(offset[rid], 1, int(self.task_index[rid])), 1
            block = rid // _SEQ_BLOCK
            cached = self._seq_blocks.get(block)
            if cached is None:
                cached = self._seq_block(block)
            runs, local = cached
            start = local[rid - block * _SEQ_BLOCK]
            return runs[start:start + n], n
        if self._emp_bytes is None:
            self._emp_bytes = self._emp_acc.astype(np.uint8).tobytes()
        start, n = int(self._emp_start[rid]), int(self._emp_len[rid])
        return self._emp_bytes[start:start + n], n

    def _runs(self, start: int, n: int, task: int) -> bytes:
        """Accepted runs of uniform slots start..start+n-1 under `task`'s survivals:
        #{j : u < a_j} as in `accepted`; a is non-increasing, so a binary search on -a."""
        if isinstance(self._uniform, UniformStream):
            neg = -self._uniform[start:start + n]
        else:
            if self._neg_uniform is None:
                self._neg_uniform = -self._uniform
            neg = self._neg_uniform[start:start + n]
        runs = self._neg_surv_by_task[task].searchsorted(neg)
        return runs.astype(np.uint8).tobytes()

    def _seq_block(self, block: int) -> tuple[bytes, np.ndarray]:
        """Runs of every uniform slot of requests block*_SEQ_BLOCK.. at once (#{j : u < a_j}
        with each slot's request's survivals, as `accepted`), cached with each request's start
        in them. The block's slots are one slice of the uniforms (`self._uniform` an array or a
        UniformStream) unless this is a `subset`, whose requests' slots are gathered."""
        lo = block * _SEQ_BLOCK
        hi = min(lo + _SEQ_BLOCK, len(self._slots))
        slots, offset = self._slots[lo:hi], self._offset[lo:hi]
        local = np.concatenate([[0], np.cumsum(slots)[:-1]]).astype(np.int64)
        base = int(offset[0])
        if np.array_equal(offset - base, local):      # contiguous: the whole trace's numbering
            u = self._uniform[base:base + int(slots.sum())]
        else:                                         # a subset's requests: gather their slots
            u = self._uniform[np.repeat(offset - local, slots) + np.arange(int(slots.sum()))]
        runs = np.zeros(len(u), dtype=np.uint8)
        by_task = self.mean_survival_by_task
        # with one task every slot has the same survivals: compare with scalars
        tasks = None if len(by_task) == 1 else np.repeat(self.task_index[lo:hi], slots)
        for a_j in by_task.T:      # one position at a time: cheap 1-D passes
            runs += u < (a_j[0] if tasks is None else a_j[tasks])
        if len(self._seq_blocks) >= 4:
            self._seq_blocks.clear()
        out = self._seq_blocks[block] = (runs.tobytes(), local.tolist())
        return out
