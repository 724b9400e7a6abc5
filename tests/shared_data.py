"""The data folder beside the checkout (../shared: prompts, traces). A user's clone has none, so
tests that read it skip, with the reason, when it is absent."""
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def needs_shared(*parts: str) -> pytest.MarkDecorator:
    """Skip unless ../shared/<parts> exists."""
    path = SHARED.joinpath(*parts)
    return pytest.mark.skipif(not path.exists(), reason=f"needs {path} (../shared, the data folder "
                              "beside the checkout; a plain clone has none)")
