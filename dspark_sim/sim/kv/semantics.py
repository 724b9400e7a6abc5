"""Which KV semantics a replay runs (`--kv-semantics`, `--prefix-caching`), the pool each replica
gets, and the bad-input check that every request could ever be served.

Three semantics: 'reserve' (prompt + output reserved at admission), 'blocks' (vLLM's paged KV
with preemption) and 'blocks+prefix' (paged KV with vLLM's prefix caching, kv/prefix.py: what
`--kv-semantics blocks --prefix-caching` runs; summary.json's `kv_semantics` names it so)."""
from __future__ import annotations

from ...errors import InputError
from ...profiles.hardware import HardwareProfile
from ..core.requests import RequestTable
from .paged import PagedPool, blocks_for
from .pool import KVPool, ReservePool
from .prefix import PrefixPool

KV_SEMANTICS = ("reserve", "blocks", "blocks+prefix")
PAGED = ("blocks", "blocks+prefix")      # the semantics whose pool grows on demand (preemption)


def with_prefix_caching(kv_semantics: str, prefix_caching: bool) -> str:
    """The semantics `--kv-semantics X --prefix-caching` names: prefix caching needs paged KV
    (a reservation of prompt + output at admission has no blocks to share)."""
    if not prefix_caching:
        return kv_semantics
    if kv_semantics not in PAGED:
        raise InputError("--prefix-caching caches vLLM's KV blocks: it needs --kv-semantics blocks",
                         field="prefix-caching")
    return "blocks+prefix"


def make_pool(kv_semantics: str, table: RequestTable, hw: HardwareProfile) -> KVPool:
    """A fresh pool of one replica: 'reserve', 'blocks' (vLLM's paged KV) or 'blocks+prefix'."""
    if kv_semantics == "blocks+prefix":
        return PrefixPool(table, hw.kv_capacity_tokens, hw.kv_block_size)
    if kv_semantics == "blocks":
        return PagedPool(hw.kv_capacity_tokens, hw.kv_block_size)
    return ReservePool(table, hw.kv_capacity_tokens)


def check_kv_fits(table: RequestTable, hw: HardwareProfile, kv_semantics: str = "reserve",
                  drafts: int = 0) -> None:
    """Bad input when some request could never be admitted (prompt + output > KV capacity) or,
    with paged KV, could never finish (its last step's blocks, drafts included, exceed the pool)."""
    kv, block_size = hw.kv_capacity_tokens, hw.kv_block_size
    if kv is not None and kv_semantics in PAGED and len(table.kv_need):
        blocks = blocks_for(table.kv_need - 1 + drafts, block_size)
        i = int(blocks.argmax())
        if int(blocks[i]) > kv // block_size:
            raise InputError(f"request {table.ids[i]!r} needs {int(blocks[i])} KV blocks of "
                             f"{block_size} tokens (prompt + output - 1 + {drafts} drafts) but "
                             f"the hardware profile holds {kv // block_size}",
                             field="kv_capacity_tokens")
        return
    if kv is not None and len(table.kv_need) and int(table.kv_need.max()) > kv:
        i = int(table.kv_need.argmax())
        raise InputError(f"request {table.ids[i]!r} needs {int(table.kv_need[i])} KV tokens "
                         f"(prompt + output) but the hardware profile holds {kv}",
                         field="kv_capacity_tokens")
