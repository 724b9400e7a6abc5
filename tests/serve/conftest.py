import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "decode"))   # toys.py, greedy_check.py
sys.path.insert(0, str(HERE.parent / "sim"))      # simkit.py
sys.path.insert(0, str(HERE))                     # servekit.py


@pytest.fixture(autouse=True, scope="session")
def _threads():
    torch.set_num_threads(1)
