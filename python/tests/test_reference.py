"""The numpy reference (helpers/reference.py) keeps both conventions for a query row without a
usable key, since the tests compare against both: excluded keys (vis False, -inf bias) leave a
zero row (ONNX, Tessera); a finite bias, however negative, only weights them (transformers)."""
import numpy as np

from helpers import reference
from helpers.inputs import qkv


def test_excluded_keys_leave_a_zero_row():
    q, k, v = qkv(np.random.default_rng(0), B=1, Hq=2, Hkv=1, S_q=2, S_kv=3, D=4, Dv=4)
    vis = np.array([[[False] * 3, [True] * 3]])
    bias = np.zeros((1, 1, 2, 3))
    bias[0, 0, 1] = -np.inf
    assert np.all(reference.attention(q, k, v, vis, 0.5)[0, :, 0] == 0)
    assert np.all(reference.attention(q, k, v, None, 0.5, bias=bias)[0, :, 1] == 0)


def test_float32_min_bias_averages_the_keys():
    q, k, v = qkv(np.random.default_rng(1), B=1, Hq=2, Hkv=1, S_q=2, S_kv=3, D=4, Dv=4)
    bias = np.full((1, 1, 2, 3), np.finfo(np.float32).min)
    out = reference.attention(q, k, v, None, 0.5, bias=bias, out_dtype=np.float64)
    mean = v[0, 0].astype(np.float64).mean(0)
    np.testing.assert_allclose(out[0], np.broadcast_to(mean, (2, 2, 4)), rtol=1e-12)


def test_gqa_model_positions_and_window():
    # One row, T = 5 cached keys, S = 2 queries at positions 3 and 4, window 2: query 3 sees keys 2..3.
    rng = np.random.default_rng(2)
    query = rng.standard_normal((1, 2, 8)).astype(np.float32)
    ck, cv = (rng.standard_normal((1, 1, 6, 8)).astype(np.float32) for _ in range(2))
    out = reference.group_query_attention(query, ck, cv, [4], 1, 1, local_window_size=2)
    vis = np.zeros((1, 2, 6), bool)
    vis[0, 0, 2:4] = vis[0, 1, 3:5] = True
    want = reference.attention(query.reshape(1, 2, 1, 8).transpose(0, 2, 1, 3), ck, cv, vis, 1 / np.sqrt(8),
                               out_dtype=np.float64)
    np.testing.assert_array_equal(out, want.transpose(0, 2, 1, 3).reshape(1, 2, 8))
