"""A port of onnxruntime's GroupQueryAttention CPU test grid (onnxruntime's
test/python/transformers/test_gqa_cpu.py, the configurations its CI runs): the same shapes and
feature combinations -- first prompt, token generation and an interactive chunk after a long past;
shared or separate past/present buffers; local window, rotary (half or interleaved), packed QKV,
softcap, smooth softmax, "custom tree attention" (position_ids and an attention_bias) -- run through
tessera.onnx.group_query_attention and onnxruntime 1.32 on the same inputs. Inputs and comparisons
are ours: Tessera against onnxruntime where it runs the node (output within 1e-5, cache rows
bit-exact, or within 1e-6 where rotary rotated them), against the float64 model of
helpers/reference.py where it refuses. Windows follow onnxruntime 1.32 (W keys including the
query's own, not the W + 1 of the older torch reference in that file).

classify(case) -> ("pass" | "refuse" | "generic" | "fail", detail), as helpers/node_cases.py."""
from __future__ import annotations

import dataclasses
import itertools
import math
import random

import numpy as np

import tessera
from helpers import reference
from helpers.ort_graphs import GQA_OPSETS, session, single_node_model

INPUTS = ("query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length", "cos_cache",
          "sin_cache", "position_ids", "attention_bias")
ROTARY = {"none": (False, False), "rotary": (True, False), "interleaved": (True, True)}


@dataclasses.dataclass(frozen=True)
class Case:
    phase: str  # "prompt" (no past tokens) or "past"
    B: int
    S: int       # new tokens
    kv: int      # prompt: tokens of the prompt (= S); past: capacity of the past buffer
    Hq: int
    Hkv: int
    D: int
    shared: bool  # past and present are one buffer
    local: bool
    rotary: str
    packed: bool
    softcap: float
    smooth: bool
    tree: bool

    @property
    def name(self):
        return (f"{self.phase}-b{self.B}-s{self.S}-kv{self.kv}-{self.Hq}q{self.Hkv}kv-d{self.D}-"
                f"{'shared' if self.shared else 'separate'}-{'local' if self.local else 'global'}-{self.rotary}-"
                f"{'packed' if self.packed else 'qkv'}-cap{self.softcap:g}-{'smooth' if self.smooth else 'softmax'}-"
                f"{'tree' if self.tree else 'plain'}")


def cases():
    """test_gqa_no_past, test_gqa_past and test_gqa_interactive_one_batch (pipeline mode), each
    configuration with a shared and a separate buffer."""
    out = []
    flags = list(itertools.product([False, True], ROTARY, [False, True], [0.0, 50.0], [False, True], [False, True]))
    for S in (127, 240):
        for local, rot, packed, cap, smooth, tree in flags:
            for shared in (True, False):
                out.append(Case("prompt", 3, S, S, 32, 8, 128, shared, local, rot, packed, cap, smooth, tree))
    for local, rot, packed, cap, smooth, tree in flags:
        for shared in (True, False):
            out.append(Case("past", 1, 1, 128, 9, 3, 64, shared, local, rot, packed, cap, smooth, tree))
    for local, rot, packed, tree in itertools.product([False, True], ROTARY, [False, True], [False, True]):
        for shared in (True, False):
            out.append(Case("past", 1, 256, 2048, 32, 8, 32, shared, local, rot, packed, 0.0, False, tree))
    return out


def _seed(case):
    return sum(ord(c) * (i + 1) for i, c in enumerate(case.name)) % (2**31)


def make_step(case):
    """Inputs of one node: feeds (by ONNX input name), attributes, and for the model: past length
    per row P [B] and the rotary positions [B, S]."""
    rng = np.random.default_rng(_seed(case))
    pick = random.Random(_seed(case))
    B, S, Hq, Hkv, D = case.B, case.S, case.Hq, case.Hkv, case.D
    r = lambda *s: rng.standard_normal(s, dtype=np.float32)  # noqa: E731
    q, k, v = r(B, S, Hq * D), r(B, S, Hkv * D), r(B, S, Hkv * D)
    if case.phase == "prompt":
        cap = S + case.kv + 8 if case.shared else S
        P = np.zeros(B, np.int64)
        total = S
        past = (r(B, Hkv, cap, D), r(B, Hkv, cap, D)) if case.shared else (None, None)
    else:
        if case.shared:
            P = rng.integers(0, case.kv - S + 1, B)
            total = case.kv
        else:
            P = rng.integers(0, case.kv, B)
            P[pick.randint(0, B - 1)] = case.kv
            total = case.kv + S
        past = (r(B, Hkv, case.kv, D), r(B, Hkv, case.kv, D))
    feeds = {"query": np.concatenate([q, k, v], axis=2) if case.packed else q,
             "key": None if case.packed else k, "value": None if case.packed else v,
             "past_key": past[0], "past_value": past[1], "seqlens_k": (P + S - 1).astype(np.int32),
             "total_sequence_length": np.array(total, np.int32)}
    attrs = {"num_heads": Hq, "kv_num_heads": Hkv, "softcap": case.softcap,
             "local_window_size": pick.randint(1, case.kv) if case.local else -1}
    if case.smooth:  # (attributes at their defaults are left out, as an exporter would)
        attrs["smooth_softmax"] = 1
    positions = P[:, None] + np.arange(S)[None, :]
    if case.rotary != "none":
        R = math.floor(D / 16) * 16
        rows = (past[0].shape[2] if case.shared else total)
        angle = rng.random((rows, R // 2)) * 2 * math.pi
        feeds["cos_cache"], feeds["sin_cache"] = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
        attrs.update(do_rotary=1, rotary_interleaved=int(ROTARY[case.rotary][1]))
    if case.tree:
        if case.phase == "prompt":  # positions (a first prompt reads position_ids[0][0]) and a bias
            # (onnxruntime's file passes position_ids [[0]]; onnxruntime 1.32 wants [batch, >= S])
            feeds["position_ids"] = positions.astype(np.int64)
            feeds["attention_bias"] = np.triu(rng.random((B, 1, S, S)).astype(np.float32), 1)
        else:  # positions and a bias of -5000 after each query's own position
            feeds["position_ids"] = positions.astype(np.int64)
            bias = np.zeros((B, 1, S, total), np.float32)
            bias[np.arange(total)[None, None, None, :] > positions[:, None, :, None]] = -5000
            feeds["attention_bias"] = bias
    return feeds, attrs, P, positions


def run_ort(feeds, attrs):
    model, f = single_node_model("GroupQueryAttention", INPUTS, feeds, ("output", "present_key", "present_value"),
                                 GQA_OPSETS, domain="com.microsoft", **attrs)
    return session(model, 4).run(None, f)


def run_tessera(case, feeds, attrs):
    past = [None if feeds[n] is None else feeds[n].copy() for n in ("past_key", "past_value")]
    optional = {n: feeds[n] for n in ("cos_cache", "sin_cache", "position_ids", "attention_bias") if n in feeds}
    return tessera.onnx.group_query_attention(
        feeds["query"], feeds["key"], feeds["value"], past[0], past[1], feeds["seqlens_k"],
        feeds["total_sequence_length"], inplace=case.shared, **optional, **attrs)


def run_model(case, feeds, attrs, P, positions):
    """The float64 model: (output [B, S, Hq*D], cache_k, cache_v) after the step."""
    B, S, Hq, Hkv, D = case.B, case.S, case.Hq, case.Hkv, case.D
    query = feeds["query"].astype(np.float64)
    k = query[:, :, Hq * D:(Hq + Hkv) * D] if case.packed else feeds["key"].astype(np.float64)
    v = query[:, :, (Hq + Hkv) * D:] if case.packed else feeds["value"].astype(np.float64)
    rot = None
    if case.rotary != "none":
        pos = positions if feeds.get("position_ids") is None or case.phase != "prompt" else \
            feeds["position_ids"].reshape(-1)[0] + np.arange(S)[None, :].repeat(B, 0)
        rot = (feeds["cos_cache"], feeds["sin_cache"], pos, ROTARY[case.rotary][1])
        k = reference.rotate(k.reshape(B, S, Hkv, D), *rot).reshape(B, S, Hkv * D)
    cap = max(int(feeds["total_sequence_length"]), 0 if feeds["past_key"] is None else feeds["past_key"].shape[2])
    ck, cv = np.zeros((B, Hkv, cap, D)), np.zeros((B, Hkv, cap, D))
    for b in range(B):
        if feeds["past_key"] is not None:
            ck[b, :, :P[b]], cv[b, :, :P[b]] = feeds["past_key"][b, :, :P[b]], feeds["past_value"][b, :, :P[b]]
        ck[b, :, P[b]:P[b] + S] = k[b].reshape(S, Hkv, D).transpose(1, 0, 2)
        cv[b, :, P[b]:P[b] + S] = v[b].reshape(S, Hkv, D).transpose(1, 0, 2)
    out = reference.group_query_attention(
        query, ck, cv, feeds["seqlens_k"], Hq, Hkv, attrs["local_window_size"], case.softcap,
        attention_bias=feeds.get("attention_bias"), sink=np.zeros(Hq) if case.smooth else None, rotary=rot)
    return out, ck, cv


def _compare(case, got, want, P, cache_atol):
    np.testing.assert_allclose(got[0], want[0], atol=1e-5, rtol=1e-5, err_msg="output")
    for i, name in ((1, "present_key"), (2, "present_value")):
        for b in range(case.B):
            T = P[b] + case.S
            np.testing.assert_allclose(got[i][b, :, :T], want[i][b, :, :T], atol=cache_atol, rtol=0, err_msg=name)


def classify(case):
    feeds, attrs, P, positions = make_step(case)
    try:
        got = run_tessera(case, feeds, attrs)
    except ValueError as e:
        return "refuse", str(e).splitlines()[0]
    except TypeError as e:
        return "generic", f"TypeError: {e}"
    except Exception as e:  # noqa: BLE001
        return "fail", f"{type(e).__name__}: {e}"
    rotated = case.rotary != "none"
    try:
        want, peer = run_ort(feeds, attrs), "onnxruntime"
        cache_atol = 1e-6 if rotated else 0.0
    except Exception:  # noqa: BLE001 - onnxruntime refuses the node: the float64 model is the peer
        want, peer = run_model(case, feeds, attrs, P, positions), "model"
        cache_atol = 1e-6
    try:
        _compare(case, got, want, P, cache_atol)
    except AssertionError as e:
        return "fail", f"vs {peer}: " + " ".join(str(e).split())[:300]
    return "pass", peer
