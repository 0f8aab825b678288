"""SamplingOptions: one object from the user's or the request's options to the Sampler and to a row's RowParams."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from piegpu import ValidationError
from piegpu.samplers import from_spec
from piegpu.samplers.options import SamplingOptions
from piegpu.samplers.rows import RowParams


@pytest.mark.parametrize("kwargs, names", [
    (dict(sampler="top-k", p=0.9), ["p=0.9", "top-k", "k=", "top_p=0.9"]),  # was silently TopK(0.9)
    (dict(sampler="top-p", k=40), ["k=40", "top-p", "top_k=40"]),
    (dict(sampler="greedy", a=0.2), ["a=0.2", "greedy"]),
    (dict(sampler="min-p", a=0.2), ["a=0.2", "min-p", "value="]),
    (dict(sampler="top-p", p=0.5, value=0.7), ["value=0.7", "p=0.5"]),
    (dict(sampler="greedy", value=3), ["greedy", "takes no parameter"]),
    (dict(sampler="top-p", nucleus=0.9), ["unknown", "nucleus"]),
])
def test_a_parameter_that_is_not_the_samplers_is_an_error_naming_it(kwargs, names):
    with pytest.raises(ValidationError) as e:
        SamplingOptions.of(**kwargs)
    for n in names:
        assert n in str(e.value)


@pytest.mark.parametrize("sampler, kw", [
    ("greedy", {}), ("temperature", {}), ("top-k", {"k": 5}), ("top-p", {"p": 0.8}), ("min-p", {"p": 0.1}),
    ("typical", {"p": 0.9}), ("top-a", {"a": 0.3}), ("top-k", {"value": 7, "top_p": 0.9, "min_p": 0.05}),
    ("mirostat", {"value": 4.0, "mirostat_eta": 0.2}), ("greedy", {"top_k": 3, "repetition_penalty": 1.2}),
])
def test_the_sampler_is_from_spec_of_the_same_options(sampler, kw):
    kw = dict(kw)
    value = next((kw.pop(k) for k in ("value", "k", "p", "a") if k in kw), None)
    opts = SamplingOptions.of(sampler, 0.7, value=value, **kw)
    assert opts.sampler == from_spec(sampler, 0.7, value, **kw)


def test_row_params_carry_the_same_settings_as_the_sampler():
    opts = SamplingOptions.of("temperature", 0.8, top_k=40, top_p=0.9, min_p=0.05, typical=0.95,
                              repetition_penalty=1.1, presence_penalty=0.5, frequency_penalty=0.25,
                              logit_bias={7: -2.0, 3: 1.0})
    assert opts.row_params(seed=9, logprobs=True) == RowParams(0.8, 40, 0.9, 0.05, 9, True, 1.1, 0.5, 0.25,
                                                               ((3, 1.0), (7, -2.0)), typical_p=0.95)
    # off values add no stage and give the row's off values
    off = SamplingOptions.of("temperature", 1.0, top_k=0, top_p=1.0, min_p=0.0, typical=1.0)
    assert off.row_params(seed=1) == RowParams(1.0, seed=1)
    # any other truncation goes as the row's chain, in the sampler's order
    from piegpu.samplers import XTC, TopA
    assert SamplingOptions.of("top-a", a=0.2).row_params().chain == (TopA(0.2),)
    assert SamplingOptions.of("top-a", a=0.2, xtc_probability=0.5).row_params().chain == (TopA(0.2), XTC(0.5))


def test_the_server_builds_its_rows_through_the_same_options():
    """A request's sampling fields give the RowParams that SamplingOptions gives for the same values."""
    from piegpu.server.app import Api
    from piegpu.server.protocol import ChatCompletionRequest
    req = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], temperature=0.6, top_p=0.9,
                                top_k=20, min_p=0.1, presence_penalty=0.3, seed=4, n=2, logit_bias={"5": -1.0})
    api = Api(SimpleNamespace(vocab=100, model=None), "m")
    rows = api.row_params(req, logprobs=False, top=0)
    want = SamplingOptions.of("temperature", 0.6, top_k=20, top_p=0.9, min_p=0.1, presence_penalty=0.3,
                              logit_bias={5: -1.0})
    assert rows == [want.row_params(seed=4), want.row_params(seed=5)]
