"""`piegpu generate` flags for the sampler library and the inferlets."""

from __future__ import annotations

import json

import pytest

from piegpu.cli import _check_modes, _sampler_options, build_parser, main
from piegpu.errors import PieGpuError


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
    (("--speculative", "4", "--top-p", "0.9"), "greedy decoding"),
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
