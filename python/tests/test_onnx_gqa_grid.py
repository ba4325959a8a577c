# A port of onnxruntime's GroupQueryAttention CPU test grid (helpers/gqa_grid.py): 624 steps of
# onnxruntime's own shapes and feature combinations, Tessera against onnxruntime 1.32 (or the
# float64 model where onnxruntime refuses the node). A step tessera.onnx refuses by name is
# skipped with its message; everything else must pass.
#
#   python python/tests/test_onnx_gqa_grid.py    prints the pass / refuse / fail counts
from __future__ import annotations

import sys

import pytest

from helpers import gqa_grid

CASES = gqa_grid.cases()
# The first-prompt steps (3 x 240 tokens x 32 heads of 128) take most of the time: marked slow,
# so `-m "not slow"` keeps the token-generation and interactive steps in a quick run.
PARAMS = [pytest.param(c, id=c.name, marks=[pytest.mark.slow] if c.phase == "prompt" else []) for c in CASES]


@pytest.mark.parametrize("case", PARAMS)
def test_grid(case):
    status, detail = gqa_grid.classify(case)
    if status == "refuse":
        pytest.skip(f"refused: {detail}")
    assert status == "pass", detail


if __name__ == "__main__":
    import collections
    counts = collections.Counter()
    peers = collections.Counter()
    for c in CASES:
        status, detail = gqa_grid.classify(c)
        counts[status] += 1
        if status == "pass":
            peers[detail] += 1
        else:
            print(f"{status:7s} {c.name}: {detail}", flush=True)
    print(f"{len(CASES)} steps: {counts['pass']} pass ({dict(peers)}), {counts['refuse']} refuse (ValueError), "
          f"{counts['generic']} refuse (generic TypeError), {counts['fail']} fail")
