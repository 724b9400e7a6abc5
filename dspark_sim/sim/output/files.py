"""Per-request output written in chunks, with the summary accumulated in the same pass.

requests.csv is written `chunk_rows` rows at a time into a temporary file beside the target and
renamed onto it at the end (nothing is left behind on an error); the bytes equal those of
writing the whole frame at once (metrics.requests_csv). `requests.parquet` (when pyarrow is
installed) holds the same columns, one row group per chunk.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from ...errors import InputError
from ...fileio import atomic_path
from ..core.requests import RequestTable
from .metrics import request_columns
from .summary import SummaryAccumulator

REQUEST_FORMATS = ("csv", "parquet")
CHUNK_ROWS = 100_000


def requests_file_name(fmt: str) -> str:
    return f"requests.{fmt}"


def check_request_format(fmt: str) -> None:
    """Bad input for an unknown format, or parquet without pyarrow."""
    if fmt not in REQUEST_FORMATS:
        raise InputError(f"unknown requests format {fmt!r}; choose {' or '.join(REQUEST_FORMATS)}",
                         field="requests-format")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise InputError("parquet output needs pyarrow (pip install pyarrow)",
                             field="requests-format") from None


def write_requests(table: RequestTable, path: str | Path, summary: SummaryAccumulator | None = None,
                   *, fmt: str = "csv", chunk_rows: int = CHUNK_ROWS,
                   progress: Callable[[int], None] | None = None) -> None:
    """Write the table's requests (trace order) to `path` atomically, `chunk_rows` at a time;
    feed each chunk to `summary`; call progress(rows written so far) after each chunk."""
    check_request_format(fmt)
    with atomic_path(path) as tmp:
        if fmt == "csv":
            with tmp.open("w", encoding="utf-8", newline="") as handle:
                for lo, frame in _chunks(table, chunk_rows, summary, progress):
                    frame.to_csv(handle, index=False, header=lo == 0, lineterminator="\n")
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            writer = None
            try:
                for _, frame in _chunks(table, chunk_rows, summary, progress):
                    batch = pa.Table.from_pandas(frame, preserve_index=False)
                    if writer is None:
                        writer = pq.ParquetWriter(tmp, batch.schema)
                    writer.write_table(batch)
            finally:
                if writer is not None:
                    writer.close()


def _chunks(table: RequestTable, chunk_rows: int, summary: SummaryAccumulator | None, progress):
    for lo in range(0, max(table.n, 1), max(1, chunk_rows)):
        hi = min(table.n, lo + chunk_rows)
        columns = request_columns(table, lo, hi)
        if summary is not None:
            summary.add(columns)
        yield lo, pd.DataFrame(columns)
        if progress is not None:
            progress(hi)
