"""Token masks: the trie walk equals brute force over the vocabulary, budgets guarantee completion,
and the packed u32 mask unpacks identically on the host and on the device."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import dtype, eta
from piegpu.inferlets.json_grammar import JsonGrammar
from piegpu.inferlets.token_mask import TokenMasker, TokenVocabulary, device_allowed, token_bytes, unpack_mask

TOY = [None, None] + [bytes([b]) for b in range(256)] + [
    b'{"', b'":', b'", "', b'"}', b"true", b"false", b"null", b" {", b"]}", b"123", b"-1.5e3", b'\\"', b"\\u00",
    b"\xc3\xa9", b"\xe4\xb8", b"\xad", b'name', b'"name": "', b"  ", b"\n  ", b"},{", b'"age": ']


def brute_force(g: JsonGrammar, pieces: list, sid: int, budget=None) -> set:
    out = set()
    for tid, b in enumerate(pieces):
        if not b:
            continue
        end = g.feed(sid, b)
        if end >= 0 and (budget is None or g.distance(end) <= budget - 1):
            out.add(tid)
    return out


@pytest.mark.parametrize("schema", [None, {}, {"type": "object", "properties": {"name": {"type": "string"},
                                                                            "age": {"type": "integer"}},
                                           "required": ["name", "age"]}])
def test_walk_equals_brute_force_on_a_toy_vocabulary(schema):
    g = JsonGrammar(schema)
    vocab = TokenVocabulary(TOY)
    m = TokenMasker(g, vocab, eos_ids=[1])
    rng = np.random.default_rng(0)
    for trial in range(40):
        sid = g.start
        for _ in range(int(rng.integers(0, 12))):
            allowed = m.allowed(sid)
            allowed = allowed[allowed != 1]
            if not allowed.size:
                break
            sid = m.advance(sid, int(rng.choice(allowed)))
        for budget in (None, 3, 8, 30):
            want = brute_force(g, TOY, sid, budget)
            if g.accepting(sid):
                want.add(1)
            assert set(m.allowed(sid, budget).tolist()) == want
            assert set(np.flatnonzero(unpack_mask(m.mask(sid, budget), len(TOY))).tolist()) == want


def test_budget_always_leaves_a_way_to_finish():
    """Greedy walks that pick the longest allowed token still end complete exactly within the budget."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array"}},
              "required": ["name", "tags"]}
    g = JsonGrammar(schema)
    m = TokenMasker(g, TokenVocabulary(TOY), eos_ids=[1])
    need = g.distance(g.start)
    for budget in range(need, need + 12):
        sid, used = g.start, 0
        while not g.closed(sid) and used < budget:
            allowed = [t for t in m.allowed(sid, budget - used).tolist() if t != 1]
            if not allowed:
                assert g.accepting(sid)
                break
            sid = m.advance(sid, max(allowed, key=lambda t: (len(TOY[t]), t)))
            used += 1
        assert g.accepting(sid), (budget, used, g.stack(sid))


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


def test_real_vocabulary(default_model):
    tok = default_model.tokenizer
    pieces = token_bytes(tok, default_model.config.vocab_size)
    assert pieces[0] is None and pieces[2] is None  # special tokens are never allowed
    text = 'Café {"naïve": "中文 ✓", "n": -1.5e3}\n'
    ids = tok.encode(text).ids
    assert b"".join(pieces[i] for i in ids).decode("utf-8") == tok.decode(ids) == text
    g = JsonGrammar({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    vocab = TokenVocabulary.of(tok, default_model.config.vocab_size)
    assert TokenVocabulary.of(tok, default_model.config.vocab_size) is vocab  # built once per tokenizer
    m = TokenMasker(g, vocab, default_model.config.eos_token_ids)
    for prefix in (b"", b'{"ci', b'{"city": "Par', b'{"city": "Paris"'):
        sid = g.feed(g.start, prefix)
        assert set(m.allowed(sid, 64).tolist()) == brute_force(g, pieces, sid, 64) | (
            set(default_model.config.eos_token_ids) if g.accepting(sid) else set())
