import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))   # tests/decode/toys.py


@pytest.fixture(autouse=True, scope="session")
def _threads():
    torch.set_num_threads(1)   # a shared 2-core machine: one thread is faster under contention
