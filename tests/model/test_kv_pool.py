"""The paged KV pool: pages as sequences grow and shrink, copy-on-write forks, sizes and errors at load."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from piegpu.errors import ValidationError
from piegpu.model.kv_pool import check_page_tokens, kv_bytes_per_position, pool_pages


def test_fork_continues_exactly_like_its_original(default_model):
    """The issue's repro: after a generation on ws, ws and ws.fork() continue with the same tokens (the
    fork carries the drawn token the session holds pending)."""
    m = default_model
    ws = m.working_set(256)
    m.generate("Once upon a time", max_tokens=2, working_set=ws, temperature=0).run()
    fork = ws.fork()
    a = m.generate(" in a land", max_tokens=6, working_set=ws, temperature=0)
    a.run()
    b = m.generate(" in a land", max_tokens=6, working_set=fork, temperature=0)
    b.run()
    assert a.tokens == b.tokens


def test_fork_of_a_long_sequence_shares_its_pages(default_model):
    """A fork of a 1000-token sequence copies nothing; the first of the two to write into the shared, partly
    filled last page copies its positions (one page per layer at most), the other writes in place."""
    m = default_model
    ws = m.working_set(1100)
    m.gpu.forward(ws, np.arange(1000) % 5000 + 100)
    P = m.kv_stats()["page_tokens"]
    before = m.kv_stats()
    fork = ws.fork()
    after = m.kv_stats()
    assert after["page_copies"] == before["page_copies"] and after["pages_used"] == before["pages_used"]
    assert after["shared_pages"] - before["shared_pages"] == -(-1000 // P)
    # both continue alike, and the original's logits are untouched by the fork's tokens
    x = m.gpu.forward(fork, [42, 43])
    copied = m.kv_stats()
    assert copied["page_copies"] - before["page_copies"] == (1 if 1000 % P else 0)
    assert copied["copied_positions"] - before["copied_positions"] == 1000 % P
    y = m.gpu.forward(ws, [42, 43])
    assert m.kv_stats()["page_copies"] == copied["page_copies"]  # the last holder writes in place
    np.testing.assert_array_equal(x, y)
    z = m.gpu.forward(fork, [7])
    w = m.gpu.forward(ws, [9])
    assert not np.array_equal(z, w)
    del fork, ws
    gc.collect()


def test_pages_follow_the_sequence(default_model):
    """Pages are taken as a sequence grows, given back as it shrinks and when it is dropped."""
    m = default_model
    gc.collect()
    base = m.kv_stats()["pages_used"]
    P = m.kv_stats()["page_tokens"]
    ws = m.working_set(4096)
    assert m.kv_stats()["pages_used"] == base  # max_tokens reserves nothing
    m.gpu.forward(ws, list(range(100, 100 + 3 * P + 1)))
    assert m.kv_stats()["pages_used"] == base + 4
    ws.set_length(P)
    assert m.kv_stats()["pages_used"] == base + 1
    ws.reset()
    assert m.kv_stats()["pages_used"] == base
    m.gpu.forward(ws, [5, 6, 7])
    del ws
    gc.collect()
    assert m.kv_stats()["pages_used"] == base


def test_rewinding_into_a_shared_page_copies_it(default_model):
    """Truncating a fork into a page it shares gives it its own copy: the original's positions stay."""
    m = default_model
    P = m.kv_stats()["page_tokens"]
    ids = list(range(200, 200 + 3 * P))
    ws = m.working_set(512)
    m.gpu.forward(ws, ids)
    fork = ws.fork()
    fork.set_length(P + 3)
    m.gpu.forward(fork, [1, 2, 3, 4, 5])  # overwrites positions P + 3 .. P + 7 of its own page
    alone = m.working_set(512)
    m.gpu.forward(alone, ids)
    np.testing.assert_array_equal(m.gpu.forward(ws, [9]), m.gpu.forward(alone, [9]))


def test_kv_stats_fields(default_model):
    s = default_model.kv_stats()
    for key in ("pages_total", "pages_used", "page_tokens", "bytes_per_page"):
        assert isinstance(s[key], int)
    c = default_model.config
    assert s["bytes_per_page"] == kv_bytes_per_position(c, s["kv_dtype"]) * s["page_tokens"]
    assert s["pages_total"] * s["page_tokens"] >= c.max_position_embeddings


def test_bad_pool_arguments(default_model):
    c = default_model.config
    for bad in (0, 3, 12, 1000, 1.5, True, "16"):
        with pytest.raises(ValidationError, match="power of two"):
            check_page_tokens(bad)
    for bad in (0, -5, True, "512"):
        with pytest.raises(ValidationError, match="kv_mb"):
            pool_pages(c, bad, 16, True, "f16")
    with pytest.raises(ValidationError, match="cannot hold one sequence of the context"):
        pool_pages(c, 8, 16, True, "f16")
    P, pages = pool_pages(c, None, 16, True, "f16")
    assert pages * P >= c.max_position_embeddings


def test_load_model_rejects_a_bad_pool():
    """The errors come at load, before any weights are uploaded."""
    from piegpu import load_model
    with pytest.raises(ValidationError, match="power of two"):
        load_model(verbose=False, page_tokens=24)
    with pytest.raises(ValidationError, match="kv_mb"):
        load_model(verbose=False, kv_mb=0)
    with pytest.raises(ValidationError, match="cannot hold one sequence"):
        load_model(verbose=False, kv_mb=16)


def test_out_of_pages_names_the_sequence_and_the_fix():
    """A pool that runs out mid-generation raises a ValidationError saying what to do; the pool is intact."""
    from tests.helpers import tiny_config, tiny_model
    cfg = tiny_config()
    P = 16
    pages = -(-cfg.max_position_embeddings // P) + 1 + 3  # one whole context, page 0, three more
    m, _ = tiny_model(cfg, kv_mb=pages * kv_bytes_per_position(cfg, "f32") * P / (1 << 20))
    gpu = m.gpu
    stats = gpu.kv_stats()
    assert stats["pages_total"] == pages - 1
    wss = []
    with pytest.raises(ValidationError, match=r"KV pool is full.*Fix: a bigger pool"):
        for _ in range(stats["pages_total"] + 1):
            ws = gpu.working_set(stats["page_tokens"] * 2)
            wss.append(ws)
            gpu.forward(ws, [1] * (stats["page_tokens"] + 1))
    assert gpu.kv_stats()["pages_free"] <= 1
    wss.clear()
    gc.collect()
    assert gpu.kv_stats()["pages_used"] == 0


def test_generation_stats_and_info_report_the_pool(default_model, capsys):
    g = default_model.generate("Once upon a time", max_tokens=20, temperature=0)
    g.run()
    s = g.stats
    P = default_model.kv_stats()["page_tokens"]
    assert s.kv_pages == -(-(len(g.prompt_ids) + 19) // P)  # the last token drawn is pending, not embedded
    assert 0 < s.kv_pages_used <= s.kv_pages_total == default_model.kv_stats()["pages_total"]
    from piegpu.cli.info import _cmd_info
    assert _cmd_info(None) == 0
    out = capsys.readouterr().out
    assert "KV pool of the default model" in out and "pages of 16 positions" in out


def test_a_batch_row_the_pool_cannot_hold_fails_alone():
    """generate_batch with a pool too small for every row: the row that cannot get a page ends with the error
    (raised after the batch, naming the prompt and the fix); the other rows finish, equal to each run alone."""
    from tests.helpers import tiny_config, tiny_model
    cfg = tiny_config(max_pos=64)
    P = 16
    pages = 64 // P + 1 + 1  # one whole context and page 0, one more: 5 usable pages
    m, _ = tiny_model(cfg, seed=3, kv_mb=pages * kv_bytes_per_position(cfg, "f32") * P / (1 << 20))
    prompts = [" ".join(str(10 + 7 * k + i) for i in range(12)) for k in range(3)]
    with pytest.raises(ValidationError, match=r"prompt 2: .*KV pool is full.*Fix: a bigger pool") as e:
        m.generate_batch(prompts, max_tokens=16)
    gens = e.value.generations
    assert len(gens[2].tokens) < 16
    batched = [g.tokens for g in gens[:2]]
    assert all(len(t) == 16 for t in batched)
    del gens, e
    gc.collect()  # the batch's working sets give their pages back
    for p, tokens in zip(prompts[:2], batched):
        alone = m.generate(p, max_tokens=16)
        alone.run()
        assert alone.tokens == tokens


def test_serve_kv_mb_argument():
    """piegpu serve --kv-mb takes a size in MiB > 0 (argparse refuses 0 and words before any model loads)."""
    from piegpu.cli import build_parser
    p = build_parser()
    assert p.parse_args(["serve", "--kv-mb", "256"]).kv_mb == 256.0
    assert p.parse_args(["serve"]).kv_mb is None
    for bad in ("0", "-1", "lots"):
        with pytest.raises(SystemExit):
            p.parse_args(["serve", "--kv-mb", bad])


def test_a_generation_without_a_working_set_gives_its_pages_back_at_once(default_model):
    gc.collect()
    base = default_model.kv_stats()["pages_used"]
    g = default_model.generate("Once upon a time", max_tokens=40, temperature=0)
    g.run()
    assert g.stats.kv_pages >= 3 and default_model.kv_stats()["pages_used"] == base  # no collection needed
    gens = default_model.generate_batch(["Once upon a time", "The sea"], max_tokens=20)
    assert all(x.stats.kv_pages >= 1 for x in gens) and default_model.kv_stats()["pages_used"] == base
    n = default_model.generate("Once upon a time", max_tokens=20, n=2, temperature=0.8)
    n.run()
    assert default_model.kv_stats()["pages_used"] == base
