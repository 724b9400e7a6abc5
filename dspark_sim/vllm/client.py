"""A small streaming client of vLLM's /v1/completions for bursts and schedules of requests.

Each request is sent at its scheduled time (seconds from the start) by a thread of its own,
with token-id prompts (so the prompt is exactly as long as asked), `max_tokens`, `ignore_eos`
and streamed responses whose every chunk carries cumulative usage, so each chunk's time and
token count are known. The scheduled and actual send times are both kept: their difference
is the client's send-time error. Loopback only; a request that fails keeps its error text.
"""
from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlparse

from ..fileio import json_text


@dataclass
class Sent:
    """What happened to one request, in seconds from the schedule's start."""

    index: int
    scheduled_s: float
    prompt_tokens: int
    max_tokens: int
    sent_s: float = float("nan")
    chunk_s: list[float] = field(default_factory=list)      # arrival of each streamed chunk
    chunk_tokens: list[int] = field(default_factory=list)   # cumulative completion tokens then
    finish_s: float = float("nan")
    completion_tokens: int = 0
    reported_prompt_tokens: int = 0
    spec: dict[str, Any] | None = None                      # metrics.speculative_decoding
    error: str | None = None

    @property
    def first_token_s(self) -> float:
        for t, n in zip(self.chunk_s, self.chunk_tokens):
            if n >= 1:
                return t
        return float("nan")




def check_loopback(url: str) -> tuple[str, int]:
    """(host, port) of an http URL on the loopback range; anything else is refused."""
    u = urlparse(url)
    host = u.hostname or ""
    if u.scheme != "http" or not (host == "localhost" or host.startswith("127.") or host == "::1"):
        from ..errors import InputError
        raise InputError(f"only http servers on 127.0.0.0/8, localhost or [::1] are served to, "
                         f"got {url!r}", field="--url")
    return host, int(u.port or 80)


def _post_stream(host: str, port: int, body: dict, rec: Sent, t0: float, timeout_s: float) -> None:
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        payload = json_text(body).encode()
        rec.sent_s = time.perf_counter() - t0
        conn.request("POST", "/v1/completions", payload, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            rec.error = f"HTTP {resp.status}: {resp.read(500).decode(errors='replace')}"
            return
        while True:
            line = resp.readline()
            if not line:
                break
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                break
            now = time.perf_counter() - t0
            doc = json.loads(data)
            usage = doc.get("usage") or {}
            if "completion_tokens" in usage:
                rec.completion_tokens = int(usage["completion_tokens"])
                rec.reported_prompt_tokens = int(usage.get("prompt_tokens") or 0)
            if doc.get("choices"):
                rec.chunk_s.append(now)
                rec.chunk_tokens.append(rec.completion_tokens)
            spec = (doc.get("metrics") or {}).get("speculative_decoding")
            if spec:
                rec.spec = spec
        rec.finish_s = rec.chunk_s[-1] if rec.chunk_s else time.perf_counter() - t0
    except (OSError, http.client.HTTPException, json.JSONDecodeError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


def run_schedule(url: str, model: str, prompts: list[list[int]], max_tokens: list[int],
                 at_s: list[float], *, timeout_s: float = 600.0, exact: bool = True,
                 extra: dict | None = None,
                 stop: Callable[[], bool] | None = None,
                 progress: Callable[[int], None] | None = None) -> list[Sent]:
    """Send request i at `at_s[i]` seconds (prompt ids `prompts[i]`, exactly `max_tokens[i]`
    tokens out, or up to that many ending at EOS when not `exact`) and wait for all; `stop()` true ends the schedule early (unsent requests keep
    error "not sent"). Requests still open `timeout_s` after the last send are cut off."""
    host, port = check_loopback(url)
    recs = [Sent(i, float(a), len(p), int(m)) for i, (p, m, a) in enumerate(zip(prompts, max_tokens, at_s))]
    threads: list[threading.Thread] = []
    t0 = time.perf_counter()
    done = [0]
    lock = threading.Lock()

    def one(rec: Sent, body: dict) -> None:
        _post_stream(host, port, body, rec, t0, timeout_s)
        with lock:
            done[0] += 1
            if progress:
                progress(done[0])

    for rec in sorted(recs, key=lambda r: r.scheduled_s):
        while True:
            wait = rec.scheduled_s - (time.perf_counter() - t0)
            if stop is not None and stop():
                break
            if wait <= 0:
                break
            time.sleep(min(wait, 0.05))
        if stop is not None and stop():
            break
        body = {"model": model, "prompt": prompts[rec.index], "max_tokens": rec.max_tokens,
                "temperature": 0.0, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                **({"min_tokens": rec.max_tokens, "ignore_eos": True} if exact else {}),
                **(extra or {})}
        th = threading.Thread(target=one, args=(rec, body), daemon=True)
        th.start()
        threads.append(th)
    for th in threads:
        th.join(timeout_s)
    for rec in recs:
        if rec.sent_s != rec.sent_s and rec.error is None:          # NaN: never sent
            rec.error = "not sent"
    return recs
