"""Packed token masks: the device unpacks the host's u32 words exactly; token bytes of the real vocabulary;
an llguidance mask through the channel layout equals its unpacked host view."""

from __future__ import annotations

import numpy as np

from piegpu import dtype, eta
from piegpu.inferlets.grammar import Constraint
from piegpu.inferlets.token_mask import device_allowed, unpack_mask
from piegpu.model.token_bytes import token_bytes


def test_device_unpacks_the_host_mask(gpu):
    for vocab in (1000, 49152):
        rng = np.random.default_rng(vocab)
        keep = rng.random(vocab) < 0.3
        keep[[0, vocab - 1, 31, 32]] = True
        bits = np.zeros((vocab + 31) // 32 * 32, bool)
        bits[:vocab] = keep
        words = np.packbits(bits, bitorder="little").view("<u4").astype(np.uint32)
        got = eta.trace(lambda w: device_allowed(w, vocab), eta.spec([words.size], dtype.u32)).run(
            words, backend="wgsl")
        assert got.tolist() == keep.tolist() == unpack_mask(words, vocab).tolist()


def test_real_vocabulary_and_an_llguidance_mask(default_model):
    tok = default_model.tokenizer
    V = default_model.config.vocab_size
    pieces = token_bytes(tok, V)
    assert pieces[0] is None and pieces[2] is None  # special tokens have no bytes
    text = 'Café {"naïve": "中文 ✓", "n": -1.5e3}\n'
    ids = tok.encode(text).ids
    assert b"".join(pieces[i] for i in ids).decode("utf-8") == tok.decode(ids) == text
    m = Constraint.from_request(default_model, regex="[0-9]+").matcher()
    words = m.mask()
    allowed = unpack_mask(words, V)
    digits = {i for i, p in enumerate(pieces) if p and p.isdigit()}
    assert set(np.flatnonzero(allowed).tolist()) == digits  # the tokenizer splits digits: one token each
    got = eta.trace(lambda w: device_allowed(w, V), eta.spec([words.size], dtype.u32)).run(words, backend="wgsl")
    assert got.tolist() == allowed.tolist()
