"""load_model(kv_dtype="f16"): K and V stored in half precision, checked against the numpy reference whose cache
rounds them the same way (ReferenceModel.new_cache("f16")). Halves live in storage buffers on every adapter
(model/kv_pages.py); the decode attention reads them eight a load."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import ValidationError
from piegpu.model import gpu_model
from piegpu.runtime.batch import Batch
from piegpu.runtime.session import run_sync
from piegpu.samplers.rows import RowParams, RowSampling, RowState
from tests.helpers import tiny_config, tiny_model

# (weights in textures on lavapipe as loaded, or in small storage chunks; K and V read through 64-bit words where
# the adapter allows -- lavapipe -- or through 32-bit ones, as on an adapter without shader-int64; one KV head of
# 32 dims, or two of 48 -- a second head's rows start mid-row, a K row is three 32-byte loads)
TWO_KV_HEADS = {"hidden": 192, "heads": 4, "kv_heads": 2, "head_dim": 48}
STORES = [(None, True, {}), (1 << 20, True, {}), (None, False, {}),
          (None, True, TWO_KV_HEADS), (None, False, TWO_KV_HEADS)]


def narrow_without(wide: bool, monkeypatch) -> None:
    """Make this process's device read K and V of halves through 32-bit words unless `wide`."""
    from piegpu.runtime.device import Device
    if not wide:
        monkeypatch.setattr(Device, "wide_loads", property(lambda self: False))


@pytest.mark.parametrize("max_binding,wide,shape", STORES)
def test_f16_kv_decode_matches_the_reference_with_a_half_precision_cache(gpu, max_binding, wide, shape, monkeypatch):
    """Prefill, then decode past SPLIT_FROM (the split attention) across pages: logits match the reference whose
    cache rounds K and V to f16 (to nearest even), far closer than the f32-cache reference (the rounding is real,
    and it is numpy's)."""
    narrow_without(wide, monkeypatch)
    model, ref = tiny_model(tiny_config(max_pos=512, **shape), seed=8, max_binding=max_binding, kv_dtype="f16")
    g = model.gpu
    assert not g.kv.textures and g.kv.store.read_octets  # (f32 pages are textures on lavapipe)
    assert g.kv.store.read_hex == (wide and g.dev.wide_loads)
    ws = model.working_set(512)
    ids = [int(x) for x in np.random.default_rng(1).integers(0, 300, gpu_model.SPLIT_FROM + 9)]
    half, full = ref.new_cache("f16"), ref.new_cache()
    a, exact = ref.forward(ids, half)[-1], ref.forward(ids, full)[-1]
    b = g.forward(ws, ids)[0]
    errs, gaps = [float(np.abs(a - b).max())], [float(np.abs(a - exact).max())]
    for _ in range(20):
        tok = int(a.argmax())
        a, exact, b = ref.forward([tok], half)[-1], ref.forward([tok], full)[-1], g.forward(ws, [tok])[0]
        errs.append(float(np.abs(a - b).max()))
        gaps.append(float(np.abs(a - exact).max()))
        assert int(a.argmax()) == int(b.argmax())
    # A value within f32 noise of a rounding boundary may round the other way here than in numpy (one f16 ulp):
    # over 265 positions that moved a logit by up to ~2e-3, the f32 cache's by 3e-3 - 1.4e-2 (median 15x more)
    assert max(errs) < 4e-3, errs
    assert np.median(errs) * 8 < np.median(gaps), (errs, gaps)


def test_f16_kv_halves_the_bytes_a_page_and_doubles_the_pages_of_a_pool(gpu):
    full, _ = tiny_model(tiny_config(max_pos=512), seed=2, kv_mb=1)
    half, _ = tiny_model(tiny_config(max_pos=512), seed=2, kv_mb=1, kv_dtype="f16")
    a, b = full.kv_stats(), half.kv_stats()
    assert (a["kv_dtype"], b["kv_dtype"]) == ("f32", "f16")
    assert b["bytes_per_page"] * 2 == a["bytes_per_page"]
    assert b["pages_total"] + 1 == 2 * (a["pages_total"] + 1)


@pytest.mark.parametrize("max_binding,wide,shape", STORES)
def test_f16_kv_batches_and_forks_give_each_sequence_its_own_tokens(gpu, max_binding, wide, shape, monkeypatch):
    """A batched decode (one dispatch for RoPE, KV write and attention on buffers) equals each prompt alone, and a
    fork (its partly filled last page copied) continues exactly as its original."""
    narrow_without(wide, monkeypatch)
    model, _ = tiny_model(tiny_config(layers=2, vocab=300, **shape), seed=11, max_binding=max_binding, kv_dtype="f16")
    greedy = RowParams(0.0)

    def batch(prompts):
        b = Batch(model, RowSampling(300), max_batch=4)
        seqs = [b.add(p, greedy, 10, row_state=RowState(greedy, 300, p)) for p in prompts]
        run_sync(b.run())
        return [s.tokens for s in seqs]

    prompts = [[5, 17, 42, 7], [100, 3], [250, 251, 9, 9, 9, 12, 40], [77]]
    assert batch(prompts) == [batch([p])[0] for p in prompts]
    ws = model.working_set(64)
    model.gpu.forward(ws, [5, 17, 42, 7, 8, 9])
    fork = ws.fork()
    assert np.array_equal(model.gpu.forward(ws, [11])[0], model.gpu.forward(fork, [11])[0])


@pytest.mark.parametrize("bad", ["f8", "float16", 16, None])
def test_a_bad_kv_dtype_is_a_validation_error_naming_it(gpu, bad):
    with pytest.raises(ValidationError, match="kv_dtype"):
        tiny_model(tiny_config(), seed=1, kv_dtype=bad)
