import os
import sys

# Tests import the in-tree package (python/tessera) even without the .venv .pth file.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
# ... and the shared test helpers (python/tests/helpers) under any pytest --import-mode.
sys.path.insert(0, os.path.dirname(__file__))


def pytest_configure(config):
    # Real-shaped vision towers against transformers: minutes each on two cores. scripts/test.sh
    # runs them; `-m "not slow"` leaves them out of a quick local run.
    config.addinivalue_line("markers", "slow: real-shaped model comparisons (minutes on two cores)")
