"""The Sampler API: names, options, composition rules, declared device states, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import ValidationError, dtype, samplers
from piegpu.samplers import SeqContext, from_spec


def test_names_and_parameters():
    assert from_spec(None).name == "greedy" and from_spec("greedy").greedy
    assert from_spec("top_k", 0.8, 5).truncations == (samplers.TopK(5),)
    assert from_spec("top-p", 1.0).param == 0.9  # the default
    assert from_spec("typical", 1.0, 0.5).name == "typical"
    assert from_spec("eta-cutoff").name == "eta-cutoff" and from_spec("epsilon-cutoff").name == "epsilon-cutoff"
    m = from_spec("mirostat", 1.0, 3.0, mirostat_eta=0.2)
    assert m.truncations == (samplers.Mirostat(3.0, 0.2),) and m.param == 3.0
    assert samplers.top_a(0.3).param == 0.3 and samplers.min_p(0.1).name == "min-p"
    for name in samplers.NAMES:
        assert from_spec(name).name in (name, "greedy", "temperature")


def test_options_compose_in_warper_order_and_imply_sampling():
    s = from_spec("greedy", 0.7, None, typical=0.9, top_k=20, repetition_penalty=1.1)
    assert not s.greedy and s.temperature == 0.7
    assert [t.name for t in s.truncations] == ["top-k", "typical"]
    assert s.processors == (samplers.Penalties(1.1),)
    assert from_spec("greedy", 0.0, None, typical=0.9).greedy  # temperature 0 is always greedy
    assert from_spec(samplers.top_p(0.5), mirostat=4.0).truncations[-1] == samplers.Mirostat(4.0)
    no_op = from_spec("greedy", repetition_penalty=1.0, presence_penalty=0.0)
    assert no_op.processors == ()


def test_samplers_are_hashable_values():
    a = from_spec("top-k", 0.8, 5, repetition_penalty=1.2)
    b = from_spec("top-k", 0.8, 5, repetition_penalty=1.2)
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a != from_spec("top-k", 0.8, 6, repetition_penalty=1.2)


def test_declared_states_and_initial_values():
    s = samplers.mirostat(4.0).with_penalties(presence=0.5)
    specs = s.states(10)
    assert [(p.name, p.shape, p.dtype) for p in specs] == [("seen_counts", (10,), dtype.i32),
                                                           ("mirostat_mu", (1,), dtype.f32), ("rng", (2,), dtype.u32)]
    init = s.initial(SeqContext((3, 3, 7, 12, -1), 10, seed=99))
    assert init["seen_counts"].tolist() == [0, 0, 0, 2, 0, 0, 0, 1, 0, 0]  # out-of-range ids are not counted
    assert init["mirostat_mu"].tolist() == [8.0] and init["rng"].tolist() == [99, 0]
    assert samplers.greedy().states(10) == ()
    # greedy drops truncation state: nothing to carry
    assert [p.name for p in samplers.Sampler(0.0, (samplers.Mirostat(),)).states(10)] == []


@pytest.mark.parametrize("make,match", [
    (lambda: samplers.top_k(-1), "k must be an int >= 0"),
    (lambda: samplers.top_p(1.5), r"p must be in \(0, 1\]"),
    (lambda: samplers.typical(0.0), "mass must be in"),
    (lambda: samplers.eta_cutoff(1.0), r"eta must be in \[0, 1\) \(0 = off\)"),
    (lambda: samplers.epsilon_cutoff(-0.1), "epsilon must be in"),
    (lambda: samplers.mirostat(-1.0), "tau"),
    (lambda: samplers.mirostat(5.0, 0.0), "learning rate"),
    (lambda: samplers.temperature(-1.0), "temperature must be"),
    (lambda: samplers.temperature(float("nan")), "temperature must be"),
    (lambda: samplers.greedy().with_penalties(repetition=0.0), "repetition_penalty"),
    (lambda: samplers.greedy().with_penalties(frequency=float("inf")), "frequency_penalty must be finite"),
    (lambda: from_spec("nucleus"), "unknown sampler 'nucleus'. Fix: one of"),
    (lambda: from_spec("greedy", bogus=1), r"unknown sampler options \['bogus'\]"),
    (lambda: from_spec("top-k", mirostat_eta=0.2), "mirostat_eta is set but no Mirostat"),
    (lambda: samplers.Sampler(1.0, (samplers.Mirostat(), samplers.TopK(3))), "Mirostat must be the last"),
    (lambda: samplers.Sampler(1.0, (samplers.Penalties(1.2),)), "not a Truncation"),
    (lambda: samplers.Sampler(1.0, (), (samplers.Penalties(1.2), samplers.Penalties(1.3))), "seen_counts"),
])
def test_bad_input_is_a_clear_error(make, match):
    with pytest.raises(ValidationError, match=match):
        make()


def test_sample_refuses_stateful_samplers_and_step_names_missing_states():
    from piegpu import eta
    with pytest.raises(ValidationError, match="carries device state"):
        eta.trace(lambda x, s: samplers.mirostat().sample(x, s), eta.spec([8], dtype.f32), eta.spec([2], dtype.u32))
    with pytest.raises(ValidationError, match="missing device states"):
        eta.trace(lambda x: samplers.top_k(3).step(x, {})[0], eta.spec([8], dtype.f32))
    # the old entry point still works for stateless samplers
    prog = eta.trace(lambda x, s: samplers.top_k(1).sample(x, s), eta.spec([8], dtype.f32), eta.spec([2], dtype.u32))
    assert int(prog.run(np.arange(8, dtype=np.float32), np.array([1, 2], np.uint32))) == 7
