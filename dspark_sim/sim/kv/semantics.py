"""Which KV semantics a replay runs (`--kv-semantics`), the pool each replica gets, and the
bad-input check that every request could ever be served."""
from __future__ import annotations

from ...errors import InputError
from ...profiles.hardware import HardwareProfile
from ..core.requests import RequestTable
from .paged import PagedPool
from .pool import KVPool, ReservePool

KV_SEMANTICS = ("reserve", "blocks")


def make_pool(kv_semantics: str, table: RequestTable, hw: HardwareProfile) -> KVPool:
    """A fresh pool of one replica: 'reserve' or 'blocks' (vLLM's paged KV)."""
    if kv_semantics == "blocks":
        return PagedPool(hw.kv_capacity_tokens, hw.kv_block_size)
    return ReservePool(table, hw.kv_capacity_tokens)


def check_kv_fits(table: RequestTable, hw: HardwareProfile, kv_semantics: str = "reserve",
                  drafts: int = 0) -> None:
    """Bad input when some request could never be admitted (prompt + output > KV capacity) or,
    with paged KV, could never finish (its last step's blocks, drafts included, exceed the pool)."""
    kv, block_size = hw.kv_capacity_tokens, hw.kv_block_size
    if kv is not None and kv_semantics == "blocks" and len(table.kv_need):
        blocks = -(-(table.kv_need - 1 + drafts) // block_size)
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
