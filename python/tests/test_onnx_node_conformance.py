# The ONNX backend node tests for Attention (opsets 23-25) and TensorScatter (opset 24), from the
# onnx package itself (onnx 1.23.2, onnx.backend.test.case.node), through tessera.onnx: cases
# nobody here wrote, judged by onnx's own comparison (helpers/node_cases.py). A case tessera.onnx
# refuses by name (ValueError) is skipped with its message; everything else must pass.
#
#   python python/tests/test_onnx_node_conformance.py    prints the pass / refuse / fail counts
from __future__ import annotations

import sys

import pytest

from helpers import node_cases

CASES = node_cases.cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node(case):
    status, detail = node_cases.classify(case)
    if status == "refuse":  # (none left: test_every_case_runs)
        pytest.skip(f"refused: {detail}")
    assert status == "pass", detail


def test_every_case_runs():
    # The cases Tessera refuses, by name: none are left (a new refusal fails here, not only as a skip).
    refused = [c.name for c in CASES if node_cases.classify(c)[0] == "refuse"]
    assert refused == []


if __name__ == "__main__":
    # --lenient-dtype: outputs cast to the expected dtype before comparing (for builds before
    # 16-bit outputs kept their type).
    import collections
    strict = "--lenient-dtype" not in sys.argv
    counts = collections.Counter()
    for c in CASES:
        status, detail = node_cases.classify(c, strict_dtype=strict)
        counts[status] += 1
        if status != "pass":
            print(f"{status:7s} {c.name}: {detail}")
    print(f"{len(CASES)} cases: {counts['pass']} pass, {counts['refuse']} refuse (ValueError), "
          f"{counts['generic']} refuse (generic TypeError), {counts['fail']} fail")
