"""`piegpu ptir check`, `piegpu compile X.ptir --target ...` and `--sampler-program X.ptir` from the command line."""

from __future__ import annotations

import pytest

from piegpu.cli import main

from .conftest import CONTAINERS, GOLDENS


def _cli(argv, capsys) -> tuple:
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_ptir_check_passes_on_every_golden_and_lists_what_piegpu_lacks(capsys):
    code, out, _ = _cli(["ptir", "check", *map(str, GOLDENS), "--backend", "interp"], capsys)
    assert code == 0, out
    assert out.count("\nok ") + out.startswith("ok ") == 17 and out.count("UNSUPPORTED") == 2
    assert "mtp_verify_tail.txt: mtp_verify_tail needs pass input 'mtp_logits'" in out


def test_ptir_check_exits_non_zero_on_a_mismatch_and_on_a_foreign_file(tmp_path, capsys):
    bad = tmp_path / "greedy_argmax.txt"
    bad.write_text(GOLDENS[0].with_name("greedy_argmax.txt").read_text().replace("I32([0])", "I32([7])"))
    code, out, _ = _cli(["ptir", "check", str(bad), "--backend", "interp"], capsys)
    assert code == 1 and "MISMATCH" in out and "take chan=1: expected I32([7]), got I32([0])" in out
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    code, _, err = _cli(["ptir", "check", str(other)], capsys)
    assert code == 2 and "is not a Pie compiler golden file" in err


@pytest.mark.parametrize("target", ["wgsl", "spirv", "msl", "cuda", "hip", "stablehlo"])
def test_compile_takes_a_ptir_container_for_every_target(target, tmp_path, capsys):
    path = tmp_path / "nucleus.ptir"
    path.write_bytes(CONTAINERS["nucleus_sample"])
    code, out, err = _cli(["compile", str(path), "--target", target], capsys)
    assert code == 0, err
    assert len(out) > 1000


def test_a_file_in_neither_format_names_the_formats_expected(tmp_path, capsys):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(32))
    want = "neither an eta container (magic b'PIEETA') nor a Pie PTIR container (magic b'PTIR')"
    code, _, err = _cli(["compile", str(path), "--target", "wgsl"], capsys)
    assert code == 2 and want in err
    code, _, err = _cli(["generate", "hi", "--sampler-program", str(path)], capsys)
    assert code == 2 and want in err and "--sampler-program" in err
    ptir = tmp_path / "nucleus.ptir"
    ptir.write_bytes(CONTAINERS["nucleus_sample"])
    code, _, err = _cli(["generate", "hi", "--sampler-program", str(ptir)], capsys)
    assert code == 2 and "reads channel chan1" in err and "epilogue_program" in err
