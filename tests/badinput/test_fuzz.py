"""Property-based fuzzing of the loaders: any input either loads or raises InputError naming the
file and a line inside it; nothing else escapes. Mutations start from valid documents and put
arbitrary JSON/YAML values at arbitrary places, or arbitrary text and bytes on arbitrary lines."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dspark_sim.decode.drafters.checkpoint import read_config
from dspark_sim.errors import InputError
from dspark_sim.profiles.acceptance import AcceptanceProfile, dumps_profile
from dspark_sim.profiles.hardware import HardwareProfile
from dspark_sim.sim.speculation.spec_config import parse_schedule
from dspark_sim.traces.importers import import_azure, import_mooncake, read_any
from dspark_sim.train.selfdistill import read_records

from .cases_misc import CONFIG, SHARD
from .cases_profiles import ACC_DOC, HW_LINES
from .cases_traces import AZURE_HEAD, AZURE_ROWS, GOOD_ROWS, MOONCAKE_ROWS

FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2 ** 70, max_value=2 ** 70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8))
values = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                      st.dictionaries(st.text(max_size=6), kids, max_size=4)),
                      max_leaves=8)
# a line of arbitrary text or bytes (not necessarily UTF-8), without line breaks
junk_lines = st.one_of(st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")),
                       st.binary(max_size=40)).map(lambda b: b.replace(b"\n", b" ").replace(b"\r", b" "))
huge_ints = st.integers(min_value=2 ** 62, max_value=2 ** 80)


def _paths(node, prefix=()):
    """Every (path to a value) in a JSON-like document."""
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def _mutate(doc, data) -> object:
    """A copy of `doc` with one value (chosen by `data`) replaced, or one key dropped."""
    doc = json.loads(json.dumps(doc))
    paths = list(_paths(doc))
    path = data.draw(st.sampled_from(paths[1:]))
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if isinstance(parent, dict) and data.draw(st.booleans()):
        parent.pop(path[-1])
    else:
        parent[path[-1]] = data.draw(st.one_of(values, huge_ints))
    return doc


def _expect_clean(load, path: Path, text_lines: int) -> None:
    """`load()` succeeds or raises InputError naming `path` and a line in 1..text_lines (or none)."""
    try:
        load()
    except InputError as exc:
        assert exc.file is not None and Path(exc.file) in (path, path.parent), str(exc)
        assert exc.line is None or 1 <= exc.line <= max(text_lines, 1), (exc.line, text_lines, str(exc))


def _write(name: str, content: str | bytes) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="fuzz-"))
    path = folder / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    return path


def _nlines(content: str | bytes) -> int:
    raw = content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content
    return raw.count(b"\n") + 1


def _jsonl(rows: list, data) -> bytes:
    """JSON Lines of `rows` with one row mutated or replaced by a junk line."""
    lines = [json.dumps(r).encode() for r in rows]
    i = data.draw(st.integers(0, len(rows) - 1))
    lines[i] = json.dumps(_mutate(rows[i], data)).encode() if data.draw(st.booleans()) \
        else data.draw(junk_lines)
    return b"\n".join(lines) + b"\n"


@FUZZ
@given(st.data())
def test_trace_loader(data):
    content = _jsonl(GOOD_ROWS, data)
    path = _write("trace.jsonl", content)
    _expect_clean(lambda: read_any(path), path, _nlines(content))


@FUZZ
@given(st.data())
def test_hw_profile_loader(data):
    doc = yaml.safe_load("\n".join(HW_LINES))
    if data.draw(st.booleans()):
        text = yaml.safe_dump(_mutate(doc, data), sort_keys=False, default_flow_style=None)
    else:
        rows = [r.encode() for r in HW_LINES]
        rows[data.draw(st.integers(0, len(rows) - 1))] = data.draw(junk_lines)
        text = b"\n".join(rows) + b"\n"
    path = _write("hw.yaml", text)
    _expect_clean(lambda: HardwareProfile.load(path), path, _nlines(text))


@FUZZ
@given(st.data())
def test_acceptance_loader(data):
    doc = _mutate(ACC_DOC, data)
    try:
        text = dumps_profile(doc) if isinstance(doc.get("tasks"), dict) else json.dumps(doc, indent=1)
    except (TypeError, AttributeError, KeyError):   # the writer needs a well-formed document
        text = json.dumps(doc, indent=1)
    path = _write("acc.json", text)
    _expect_clean(lambda: AcceptanceProfile.load(path), path, _nlines(text))


@FUZZ
@given(st.data())
def test_importers(data):
    rows = [r.encode() for r in AZURE_ROWS]
    i = data.draw(st.integers(0, len(rows) - 1))
    cells = rows[i].split(b",")
    cells[data.draw(st.integers(0, 2))] = data.draw(st.one_of(junk_lines, huge_ints.map(
        lambda v: str(v).encode()))).replace(b",", b";").replace(b'"', b"'")
    rows[i] = b",".join(cells)
    text = AZURE_HEAD.encode() + b"\n".join(rows) + b"\n"
    path = _write("azure.csv", text)
    _expect_clean(lambda: import_azure(path), path, _nlines(text))
    moon = _jsonl(MOONCAKE_ROWS, data)
    mpath = _write("moon.jsonl", moon)
    _expect_clean(lambda: import_mooncake(mpath), mpath, _nlines(moon))


@FUZZ
@given(st.one_of(values, st.lists(st.lists(scalars, max_size=4), max_size=4)), st.integers(1, 8))
def test_schedule_parser(doc, gamma):
    text = json.dumps(doc)
    path = _write("sched.json", text)
    _expect_clean(lambda: parse_schedule(str(path), gamma), path, _nlines(text))


@FUZZ
@given(st.data())
def test_checkpoint_config(data):
    doc = _mutate(CONFIG, data)
    text = json.dumps(doc, indent=1)
    folder = _write("config.json", text).parent
    _expect_clean(lambda: read_config(folder), folder / "config.json", _nlines(text))


@FUZZ
@given(st.data())
def test_distill_shards(data):
    content = _jsonl(SHARD, data)
    path = _write("shard-00000.jsonl", content)
    _expect_clean(lambda: read_records(path.parent), path, _nlines(content))
