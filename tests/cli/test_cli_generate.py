"""`piegpu generate` flags for the sampler library and the inferlets."""

from __future__ import annotations

import json
import re

import pytest

from piegpu.cli import _check_modes, _checked_options, _sampler_options, build_parser, main
from piegpu.errors import PieGpuError, ValidationError
from piegpu.samplers import from_spec


def parse(*argv):
    return build_parser().parse_args(["generate", "hi", *argv])


def test_sampler_flags_map_to_options():
    value, opts = _sampler_options(parse("--sampler", "typical", "--typical", "0.8", "--top-k", "20",
                                         "--repetition-penalty", "1.2", "--mirostat", "4", "--mirostat-eta", "0.2"))
    assert value == 0.8  # the named sampler's own flag is its parameter
    assert opts == {"top_k": 20, "mirostat": 4.0, "mirostat_eta": 0.2, "repetition_penalty": 1.2}
    assert _sampler_options(parse()) == (None, {})
    args = parse("--sampler", "eta-cutoff", "--eta-cutoff", "0.001", "--presence-penalty", "0.5")
    assert _sampler_options(args) == (0.001, {"presence_penalty": 0.5})


@pytest.mark.parametrize("argv,match", [
    (("--speculative", "4", "--json"), "cannot be combined"),
    (("--json", "--watermark", "7"), "cannot be combined yet"),
    (("--schema", "s.json", "--watermark", "7"), "cannot be combined yet"),
])
def test_conflicting_modes_are_refused(argv, match):
    with pytest.raises(PieGpuError, match=match):
        _check_modes(parse(*argv))


def test_cli_json_schema_and_errors(default_model, tmp_path, capsys):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
              "required": ["city", "population"]}
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    assert main(["generate", "What is the capital of France? Answer in JSON.", "--chat", "--schema", str(path),
                 "--max-tokens", "32"]) == 0
    out = capsys.readouterr()
    value = json.loads(out.out)
    assert set(value) == {"city", "population"} and isinstance(value["population"], int)
    assert "piegpu: JSON" in out.err
    path.write_text("{not json")
    assert main(["generate", "x", "--schema", str(path)]) == 2
    assert "is not JSON" in capsys.readouterr().err


@pytest.fixture
def no_model_load(monkeypatch):
    """load_model (imported by piegpu/cli/generate.py as piegpu.textgen.model.load_model) raises if called."""
    import piegpu.textgen.model as loaded
    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise AssertionError("piegpu generate loaded the model before checking its options")
    monkeypatch.setattr(loaded, "load_model", refuse)
    return calls


def run_cli(argv, capsys) -> tuple:
    """(exit code, stderr) of `piegpu ARGV`, whether it returns a code or exits from argparse."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv,match", [
    (("--top-p", "2"), r"top_p: p must be in \(0, 1\] \(1 = off\), got 2.0"),
    (("--sampler", "top-p", "--top-p", "1.5"), r"top_p: p must be in \(0, 1\]"),
    (("--min-p", "-1"), r"min_p: p must be in \[0, 1\] \(0 = off\)"),
    (("--top-k", "-3"), r"top_k: k must be an int >= 0 \(0 = off\), got -3"),
    (("--temperature", "-1"), "temperature must be a finite number >= 0"),
    (("--sampler", "top-k", "--temperature", "nan"), "temperature must be a finite number >= 0"),
    (("--typical", "0"), "typical: mass must be in"),
    (("--mirostat-eta", "0.2"), "mirostat_eta is set but no Mirostat"),
    (("--repetition-penalty", "0"), "repetition_penalty must be a finite number > 0"),
    (("--watermark", "7", "--watermark-delta", "-1"), "watermark: delta"),
    (("--schema", "/nonexistent/schema.json"), "generate --schema: cannot read"),
    (("--max-tokens", "0"), r"argument --max-tokens: must be an int >= 1, got 0"),
    (("--max-tokens", "many"), r"argument --max-tokens: invalid int value: 'many'"),
    (("--seed", "-1"), r"argument --seed: must be an int in \[0, 4294967296\), got -1"),
    (("--seed", str(1 << 32)), r"argument --seed: must be an int in \[0, 4294967296\)"),
    (("--speculative", "0"), r"argument --speculative: must be an int >= 1"),
    (("--speculative", "2", "--ngram", "0"), r"argument --ngram: must be an int >= 1"),
])
def test_bad_options_fail_before_the_model_loads(no_model_load, tmp_path, capsys, argv, match):
    # a missing --model path as well: had the model loaded first, the error would name the model
    code, err = run_cli(["generate", "hi", "--model", str(tmp_path / "no-such-model"), *argv], capsys)
    assert code == 2, err
    assert re.search(match, err), err
    assert "no such model" not in err and not no_model_load


def test_checked_options_build_the_sampler_the_generation_uses():
    sampler, watermark, schema = _checked_options(parse("--sampler", "top-p", "--top-p", "0.5", "--top-k", "20",
                                                        "--temperature", "0.7", "--presence-penalty", "0.5"))
    assert sampler.sampler == from_spec("top-p", 0.7, 0.5, top_k=20, presence_penalty=0.5)  # one SamplingOptions
    assert [t.name for t in sampler.sampler.truncations] == ["top-p", "top-k"] and watermark is None and schema is None
    # off values are accepted and add no stage (--top-p 1 still asks to sample, at the temperature)
    off, _, _ = _checked_options(parse("--top-p", "1", "--min-p", "0", "--top-k", "0", "--repetition-penalty", "1"))
    assert off.sampler == from_spec("temperature", 1.0)
    with pytest.raises(ValidationError, match="top_p"):
        _checked_options(parse("--top-p", "2"))


def test_options_are_checked_before_load_in_cli_source():
    """Guard for the test above: the CLI still loads models through the function the fixture patches."""
    import inspect

    import piegpu.cli as cli
    src = inspect.getsource(cli._cmd_generate)
    assert "from ..textgen.model import load_model" in src, "the CLI loads the model elsewhere: update no_model_load"
    assert src.index("_checked_options(args)") < src.index("load_model(args.model")
