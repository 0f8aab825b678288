"""Containers made by the Rust tracer (sdk/rust) decode in Python, equal the Python traces byte for byte, run on
the interpreter like them, and survive the Python decoder's mutation tests (truncation, bit flips, wrong magic).

cargo runs sdk/rust/examples/dump_corpus.rs, which traces tests/sdk/programs.py's programs as written in
sdk/rust/tests/common/programs.rs. A missing cargo is a failure, not a skip.
"""

from __future__ import annotations

import json

import pytest

from piegpu import eta
from tests.sdk.foreign import assert_mutations_rejected, assert_runs_like_python, rust_example
from tests.sdk.programs import PROGRAMS


@pytest.fixture(scope="module")
def rust_made() -> dict:
    return {name: bytes.fromhex(h) for name, h in json.loads(rust_example("dump_corpus")).items()}


def test_cargo_traces_every_corpus_program(rust_made):
    assert sorted(rust_made) == sorted(PROGRAMS)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_rust_container_decodes_and_runs_like_the_python_trace(rust_made, name):
    assert_runs_like_python(rust_made[name], PROGRAMS[name](), seeds=(3,))


def test_mutations_of_rust_made_containers_are_rejected(rust_made):
    assert_mutations_rejected(rust_made, seed=61)


def test_the_examples_of_all_three_languages_are_one_program():
    """examples/top_a.py, sdk/js/examples/top_a.js and sdk/rust/examples/top_a.rs: same bytes (likewise top-p, the greedy loop)."""
    import importlib.util

    from piegpu import Channel, dtype, samplers
    from piegpu.eta import IntrinsicContext, intrinsics
    from tests.sdk.foreign import js_output
    from tests.sdk.make_corpus import ROOT
    spec = importlib.util.spec_from_file_location("top_a_example", ROOT / "examples" / "top_a.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    V, S = 49152, eta.spec
    token_in, token_out = Channel([1], dtype.i32).named("token_in"), Channel([1], dtype.i32).named("token_out")

    def greedy():
        token = eta.reshape(eta.reduce_argmax(intrinsics.output(0, "logits")), [1])
        token_in.put(token)
        token_out.put(token)

    python = {"top_a": eta.trace(mod.top_a, *mod.top_a.eta_specs),
              "top_p": eta.trace(samplers.top_p(0.9, 0.8).sample, S([V], dtype.f32), S([2], dtype.u32)),
              "greedy_loop": eta.trace(greedy, context=IntrinsicContext.for_logits(V))}
    for name, py in python.items():
        assert rust_example(name) == py.to_bytes(), name
        assert js_output(f"examples/{name}.js") == py.to_bytes(), name
