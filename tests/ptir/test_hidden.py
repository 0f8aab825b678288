"""Pie's `hidden` pass input (f32 [rows, hidden_size], the readout rows after the final norm): piegpu's profile
accepts it, containers reading it run as epilogues of a real forward pass, the golden runner feeds it."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import Channel, ForwardPass, StateGeometry, ValidationError, dtype, eta
from piegpu.eta import IntrinsicContext, intrinsics
from piegpu.ptir import check_golden, decode, encode, load
from piegpu.ptir.golden import format_value
from piegpu.ptir.validate import PtirRejected, bind, piegpu_profile, readiness
from piegpu.ptir.wire import Container, Op, fnv1a64
from piegpu.runtime.session import run_sync as run
from tests.helpers import tiny_config, tiny_model

from .conftest import CONTAINERS

PROMPT = [5, 17, 42, 7, 9]


def probe(vocab: int, hidden: int) -> bytes:
    """A container reading both pass inputs: chan0 <- hidden [1, H]; chan1 <- max logit + sum(hidden^2)."""
    hid, score = Channel([1, hidden], dtype.f32).named("hid"), Channel([1], dtype.f32).named("score")

    def fn():
        h = intrinsics.outputs("hidden")
        hid.put(h)
        score.put(eta.reduce_max(intrinsics.outputs("logits")) + eta.reduce_sum(h * h))
    return eta.trace(fn, context=IntrinsicContext.for_pass(vocab, hidden)).to_ptir()


def test_a_container_reading_hidden_validates_with_pies_rules():
    data = probe(16, 8)
    c = decode(data)
    hidden = [op for op in c.stages[0][1] if op.name == "intrinsic_val" and op.fields["intrinsic"] == "hidden"]
    assert [(op.fields["dtype"], op.fields["shape"]) for op in hidden] == [("f32", (1, 8))]
    bind(c, piegpu_profile(16))  # accepted: piegpu's forward pass provides it
    prog = load(data)
    assert {n.attr["name"]: n.type.shape for n in prog.nodes if n.op == "intrinsic"} == {"hidden": (1, 8),
                                                                                          "logits": (1, 16)}
    flat = Container(stages=[("epilogue", [Op("intrinsic_val", (), {"intrinsic": "hidden", "dtype": "f32",
                                                                     "shape": (8,)})])])
    with pytest.raises(PtirRejected, match=r"IntrinsicTypeRule \{ intr: Hidden, stage: Epilogue \}.*Fix: declare "
                                           r"hidden as f32 \[rows, hidden_size\]"):  # Pie's type rule: 2-D
        load(encode(flat))


def test_inputs_still_missing_are_named_and_a_row_past_0_does_not_export():
    with pytest.raises(PtirRejected, match="pass input 'mtp_logits' is not provided by piegpu's forward pass"):
        load(CONTAINERS["mtp_verify_tail"])
    out = Channel([8], dtype.f32).named("out")
    ctx = IntrinsicContext.for_pass(16, 8, rows=2)
    with pytest.raises(ValidationError, match=r"\(intrinsic\) has no PTIR equivalent: a PTIR pass input is read "
                                              r"whole, \[rows, size\]"):
        eta.trace(lambda: out.put(intrinsics.output(1, "hidden")), context=ctx).to_ptir()


def golden_text(data: bytes, hidden: np.ndarray, want: np.ndarray) -> str:
    """A golden in Pie's format: one pass fed `hidden` (and no logits: the step reports the one it misses),
    then one fed both, whose take of chan0 is `want`."""
    c = decode(data)
    inputs = ("inputs {}: PassInputs {{ logits: {}, mtp_logits: None, mtp_drafts: None, hidden: Some({}), "
              "value_head: None, query: [], attn_score: [] }}")
    logits = np.zeros(16, np.float32)
    return "\n".join(["name: hidden_probe", f"hash: 0x{fnv1a64(data):016x}", f"container: {data.hex()}",
                      "verdict: OK", *[f"readiness: chan={ch} phase=0x{ph:02x} dir={d}" for ch, ph, d in readiness(c)],
                      inputs.format(0, "None", format_value(hidden)), "step 0: error MissingIntrinsic(logits)",
                      inputs.format(1, f"Some({format_value(logits)})", format_value(hidden)),
                      "step 1: committed=true missed=None sinks=0", f"take chan=0 = {format_value(want)}",
                      f"take chan=1 = {format_value(np.float32([np.sum(hidden * hidden)]))}"]) + "\n"


@pytest.mark.parametrize("backend", ["interp", "wgsl", "spirv"])
def test_the_golden_runner_feeds_a_cases_hidden_input(backend, request):
    if backend != "interp":
        request.getfixturevalue("gpu")
    hidden = np.linspace(-1, 1, 8, dtype=np.float32)
    report = check_golden(golden_text(probe(16, 8), hidden, hidden), backend=backend)
    assert report.ok, report
    assert [c.what for c in report.checks if c.what.startswith(("step", "take"))] == [
        "step 0", "step 1", "take chan=0", "take chan=1"]
    bad = check_golden(golden_text(probe(16, 8), hidden, -hidden), backend=backend)
    assert [c.what for c in bad.mismatches] == ["take chan=0"]  # the take compares what was fed, not vacuous


@pytest.fixture(scope="module")
def tiny(gpu):
    return tiny_model(tiny_config(layers=2, vocab=300), seed=11)


@pytest.mark.parametrize("target", ["wgsl", "spirv"])
def test_a_container_reading_hidden_runs_as_an_epilogue_of_a_real_pass(tiny, target):
    model, ref = tiny
    c = model.config
    hid, score = Channel([1, c.hidden_size], dtype.f32), Channel([1], dtype.f32)
    fwd = ForwardPass()
    fwd.embed(Channel.from_(PROMPT, dtype.i32), Channel.from_([0, len(PROMPT)], dtype.u32))
    fwd.state([model.working_set(16)], StateGeometry.folding())
    fwd.epilogue_program(probe(c.vocab_size, c.hidden_size), channels={"chan0": hid, "chan1": score})
    run(model.pipeline(target=target).submit(fwd))
    want = ref.hidden(PROMPT, ref.new_cache())[-1:]
    got = run(hid.take())
    np.testing.assert_allclose(got, want, atol=3e-5, rtol=1e-5)
    np.testing.assert_allclose(run(score.take()), (want @ ref.lm_head.T).max() + (want * want).sum(), rtol=1e-5)


def test_a_container_traced_for_another_hidden_size_is_refused_by_name(tiny):
    model, _ = tiny
    fwd = ForwardPass()
    fwd.embed(Channel.from_(PROMPT, dtype.i32), Channel.from_([0, len(PROMPT)], dtype.u32))
    fwd.state([model.working_set(16)], StateGeometry.folding())
    fwd.epilogue_program(probe(model.config.vocab_size, 64), channels={"chan0": Channel([1, 64], dtype.f32),
                                                                       "chan1": Channel([1], dtype.f32)})
    with pytest.raises(ValidationError, match=r"reads intrinsic 'hidden' row 0 as f32\[1, 64\], but this pass "
                                              r"provides f32\[1, 96\]"):
        run(model.pipeline().submit(fwd))
