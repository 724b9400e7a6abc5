"""The drafter interface and the registry that resolves `--drafter NAME_OR_PATH`.

A drafter sees the committed `Context` of one request (tokens, and the target's features at
the layers it declares in `taps`) and proposes up to gamma tokens after the anchor, with
their draft distributions q (None for deterministic drafters) and, if it has a confidence
head, the conditional survival probabilities c_1..c_k. Drafters that condition on the
target receive it at construction and share its frozen `embed_tokens` and `lm_head`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from ...errors import InputError
from ..context import Context
from ..sampling import Sampling
from ..target import Target


@dataclass
class Draft:
    """Up to gamma proposed tokens for one request."""

    tokens: torch.Tensor                      # (k,) int64, k <= gamma (k = 0: plain decoding step)
    q: torch.Tensor | None = None             # (k, V) warped draft probabilities; None = deterministic
    confidence: torch.Tensor | None = None    # (k,) P(draft j survives | drafts < j survived)
    copied: torch.Tensor | None = None        # (k,) bool: the copy bias applied at slot j

    def __post_init__(self) -> None:
        k = self.tokens.numel()
        if self.q is not None and self.q.shape[0] != k:
            raise ValueError(f"draft has {k} tokens but {self.q.shape[0]} rows of q")
        if self.confidence is not None and self.confidence.numel() != k:
            raise ValueError(f"draft has {k} tokens but {self.confidence.numel()} confidences")
        if self.copied is not None and self.copied.numel() != k:
            raise ValueError(f"draft has {k} tokens but {self.copied.numel()} copy flags")

    def __len__(self) -> int:
        return self.tokens.numel()

    def head(self, l: int) -> "Draft":
        """The first l drafts (what a scheduler chose to verify)."""
        return Draft(self.tokens[:l], None if self.q is None else self.q[:l],
                     None if self.confidence is None else self.confidence[:l],
                     None if self.copied is None else self.copied[:l])

    @staticmethod
    def empty(device: torch.device | str = "cpu") -> "Draft":
        """No proposal: the step verifies only the anchor (plain decoding)."""
        return Draft(torch.empty(0, dtype=torch.long, device=device))


class Drafter:
    """Base class of drafters; subclasses implement `propose` and may keep per-request state."""

    name: str = "drafter"
    kind: str = "drafter"            # `drafter_kind` of acceptance profiles / hw draft_time
    taps: tuple[int, ...] = ()       # target layers whose outputs the drafter reads (-1 = top)
    has_confidence: bool = False     # drafts carry confidences c_k (Draft.confidence)

    def begin(self, ctx: Context) -> None:
        """Start a new request (the context holds the prompt and the first generated token)."""

    def propose(self, ctx: Context, gamma: int, sampling: Sampling,
                generator: torch.Generator | None = None) -> Draft:
        """Up to `gamma` tokens continuing `ctx.tokens`, drawn with `sampling` if stochastic."""
        raise NotImplementedError


class NoDrafter(Drafter):
    """Proposes nothing: the loop then is plain autoregressive decoding."""

    name = kind = "none"

    def __init__(self, target: Target | None = None) -> None:
        self._device = target.device if target is not None else torch.device("cpu")

    def propose(self, ctx: Context, gamma: int, sampling: Sampling,
                generator: torch.Generator | None = None) -> Draft:
        return Draft.empty(self._device)


@dataclass(frozen=True)
class DrafterEntry:
    """A named product drafter: `factory(target)` builds it for that target."""

    name: str
    factory: Callable[[Target], Drafter]
    help: str


_REGISTRY: dict[str, DrafterEntry] = {}
# Checkpoint kinds: a directory (or file) whose config.json says {"kind": K} is loaded by
# _CHECKPOINT_LOADERS[K](path, target). Trained drafters register their kind here, with a
# check of the checkpoint's files that runs before any model is loaded.
_CHECKPOINT_LOADERS: dict[str, Callable[[Path, Target], Drafter]] = {}
_CHECKPOINT_CHECKS: dict[str, Callable[[Path], object]] = {}


@dataclass(frozen=True)
class CheckpointFormat:
    """A checkpoint layout of another project, recognised from its config.json (which has no
    `kind`): `matches(config)` says whether a parsed config is one, `loader(path, target)` builds
    the drafter, `check(path)` validates it without a target."""

    name: str
    description: str
    matches: Callable[[dict], bool]
    loader: Callable[[Path, Target], Drafter]
    check: Callable[[Path], object] | None = None


_CHECKPOINT_FORMATS: dict[str, CheckpointFormat] = {}


def register_drafter(name: str, factory: Callable[[Target], Drafter], help: str) -> None:
    """Offer a drafter as `--drafter NAME`."""
    _REGISTRY[name] = DrafterEntry(name, factory, help)


def register_checkpoint_kind(kind: str, loader: Callable[[Path, Target], Drafter],
                             check: Callable[[Path], object] | None = None) -> None:
    """Let `--drafter PATH` load checkpoints whose config.json has `"kind": KIND`; `check(path)`
    validates such a checkpoint without a target (InputError on a bad file)."""
    _CHECKPOINT_LOADERS[kind] = loader
    if check is not None:
        _CHECKPOINT_CHECKS[kind] = check


def register_checkpoint_format(fmt: CheckpointFormat) -> None:
    """Let `--drafter PATH` load checkpoints of another project's layout (`fmt.matches`)."""
    _CHECKPOINT_FORMATS[fmt.name] = fmt


def known_formats() -> str:
    """The checkpoint formats `--drafter PATH` loads, for error messages."""
    kinds = f"dspark-sim drafters (config.json with \"kind\": {', '.join(_CHECKPOINT_LOADERS) or 'none'})"
    return "; ".join([kinds] + [f.description for f in _CHECKPOINT_FORMATS.values()])


def drafter_names() -> list[str]:
    """Names accepted by `--drafter`, in registration order."""
    return list(_REGISTRY)


def drafter_help() -> str:
    """One line per registered drafter, for --help texts."""
    return "; ".join(f"{e.name}: {e.help}" for e in _REGISTRY.values())


def make_drafter(name_or_path: str, target: Target) -> Drafter:
    """Build the drafter named `name_or_path` for `target`, or load a checkpoint by path."""
    if name_or_path in _REGISTRY:
        return _REGISTRY[name_or_path].factory(target)
    path, kind = _checkpoint_kind(name_or_path)
    if kind in _CHECKPOINT_FORMATS:
        return _CHECKPOINT_FORMATS[kind].loader(path, target)
    return _CHECKPOINT_LOADERS[kind](path, target)


def check_drafter(name_or_path: str) -> None:
    """Validate `--drafter` before a model is loaded: a registered name, or a checkpoint whose
    files are checked by its kind (bad input names the file, line and field)."""
    if name_or_path in _REGISTRY:
        return
    path, kind = _checkpoint_kind(name_or_path)
    if kind in _CHECKPOINT_FORMATS:
        if _CHECKPOINT_FORMATS[kind].check is not None:
            _CHECKPOINT_FORMATS[kind].check(path)
    elif kind in _CHECKPOINT_CHECKS:
        _CHECKPOINT_CHECKS[kind](path)


def _checkpoint_kind(name_or_path: str) -> tuple[Path, str]:
    """The checkpoint path and the `kind` its config.json names (a known one), or the name of
    the other project's format it is in; anything else is refused naming the known formats."""
    from ...fileio import read_json
    from ...profiles.validate import FieldChecker

    path = Path(name_or_path)
    if not path.exists():
        raise InputError(f"unknown drafter {name_or_path!r}: not one of "
                         f"{', '.join(_REGISTRY)} and no such checkpoint path", field="--drafter")
    config = (path / "config.json") if path.is_dir() else path.with_suffix(".json")
    if not config.is_file():
        raise InputError(f"not a drafter checkpoint: {config} is missing", file=path,
                         field="--drafter")
    data, lines = read_json(config)
    check = FieldChecker(config, lines)
    data = check.mapping(data, "(document)")
    if "kind" not in data:
        for fmt in _CHECKPOINT_FORMATS.values():
            if fmt.matches(data):
                return path, fmt.name
        arch = data.get("architectures")
        raise check.fail("kind", f"not a checkpoint format this product knows (architectures "
                         f"{arch!r}); it loads: {known_formats()}")
    kind = check.string(data["kind"], "kind")
    if kind not in _CHECKPOINT_LOADERS:
        raise check.fail("kind", f"checkpoint kind {kind!r} is not known; the product loads: "
                         f"{known_formats()}")
    return path, kind
