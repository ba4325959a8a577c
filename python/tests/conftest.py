import os
import sys

# Tests import the in-tree package (python/tessera) even without the .venv .pth file.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
# ... and the shared test helpers (python/tests/helpers) under any pytest --import-mode.
sys.path.insert(0, os.path.dirname(__file__))
