"""Roofline of the end-to-end benchmark: measured read bandwidth and the bytes a decode step reads.

Decode is memory-bound (docs/architecture.md, "Performance"): bytes per token = weights read (every text-decoder
weight, the tied embedding once as the LM head) + KV read, KV per layer = 2 * kv_heads * head_dim *
L_eff * bytes with L_eff = min(context, window) on sliding layers. Roofline tok/s = bandwidth /
bytes per token, with the best bandwidth this run measured.
"""
import os
import sys
import threading
import time

import numpy as np


def one_stream(reps=5):
    """bench/attention_peers.py's probe (numpy sum over 512 MiB, median) and its numpy GEMM rate."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    try:
        from attention_peers import roofline  # imports the tessera Python module too
        return roofline(reps)
    except Exception as e:  # the module is not built: same probe, here
        print(f"(attention_peers.roofline unavailable: {e}; using the same probe inline)")
        a = np.ones(512 * 1024 * 1024 // 4, dtype=np.float32)
        a.sum()
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            a.sum()
            ts.append(time.perf_counter() - t)
        return a.nbytes / sorted(ts)[len(ts) // 2] / 1e9, float("nan")


def multi_stream(threads=2, mib=512, reps=5):
    """`threads` numpy sums over separate arrays in parallel (numpy drops the GIL in the loop): best of reps."""
    arrs = [np.ones(mib * 1024 * 1024 // 4, dtype=np.float32) for _ in range(threads)]
    for a in arrs:
        a.sum()
    best = 0.0
    for _ in range(reps):
        barrier = threading.Barrier(threads + 1)

        def work(a):
            barrier.wait()
            a.sum()

        ts = [threading.Thread(target=work, args=(a,)) for a in arrs]
        for t in ts:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        best = max(best, sum(a.nbytes for a in arrs) / (time.perf_counter() - t0) / 1e9)
    return best


def layer_geometry(cfg):
    """[(kind, kv_heads, head_dim, window)] per layer from a (text) config dict."""
    tc = cfg.get("text_config") or cfg
    out = []
    for i, kind in enumerate(tc["layer_types"]):
        kv, hd = tc["num_key_value_heads"], tc["head_dim"]
        if kind == "full_attention":
            if tc.get("global_head_dim"):
                hd = tc["global_head_dim"]
            if tc.get("num_global_key_value_heads"):
                kv = tc["num_global_key_value_heads"]
            plc = (tc.get("per_layer_config") or {}).get(str(i)) or {}
            hd, kv = plc.get("head_dim", hd), plc.get("num_key_value_heads", kv)
        out.append((kind, kv, hd, tc["sliding_window"] if kind == "sliding_attention" else None))
    return out


def kv_bytes(cfg, context, elem=4):
    """KV bytes read by one decode step at `context` keys."""
    return sum(2 * kv * hd * (min(context, w) if w else context) * elem for _, kv, hd, w in layer_geometry(cfg))


def decode_roofline(bw_gbs, weight_bytes, cfg, context, kv_elem=4):
    return bw_gbs * 1e9 / (weight_bytes + kv_bytes(cfg, context, kv_elem))
