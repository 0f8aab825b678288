"""`piegpu compile FILE.js:NAME | FILE.eta` and `piegpu generate --sampler-program FILE.eta`: one program from any
language, the same device code and hash as the Python function."""

from __future__ import annotations

from piegpu.cli import main
from tests.sdk.foreign import rust_example
from tests.sdk.make_corpus import ROOT

TOP_A_HASH = "0b909a98442b501b70f71d71fca7ec04bf50e02ce26acff8f75232c767f83938"


def _compile(capsys, *argv) -> tuple:
    rc = main(["compile", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_python_js_and_rust_top_a_compile_to_the_same_code(capsys, tmp_path):
    eta_file = tmp_path / "top_a.eta"
    eta_file.write_bytes(rust_example("top_a"))
    saved = tmp_path / "from_js.eta"
    runs = {"py": _compile(capsys, str(ROOT / "examples" / "top_a.py") + ":top_a", "--target", "msl"),
            "js": _compile(capsys, str(ROOT / "sdk" / "js" / "examples" / "top_a.js") + ":topA", "--target", "msl",
                           "--save-container", str(saved)),
            "rust": _compile(capsys, str(eta_file), "--target", "msl")}
    for lang, (rc, out, err) in runs.items():
        assert rc == 0, (lang, err)
        assert f"// program {TOP_A_HASH} (35 nodes)" in err, lang
        assert out == runs["py"][1] and "kernel" in out, lang
    assert saved.read_bytes() == eta_file.read_bytes()


def test_js_exports_that_are_functions_or_missing(capsys, tmp_path):
    mod = tmp_path / "mine.mjs"
    sdk = (ROOT / "sdk" / "js" / "src" / "index.js").as_uri()
    mod.write_text(f'import {{ trace, spec, dtype, exp }} from "{sdk}";\n'
                   'export const build = () => trace((x) => exp(x), spec([4], dtype.f32));\n'
                   'export const notAProgram = 3;\n')
    rc, out, err = _compile(capsys, f"{mod}:build", "--target", "wgsl")
    assert rc == 0 and "exp(" in out
    rc, _, err = _compile(capsys, f"{mod}:notAProgram")
    assert rc == 2 and "notAProgram is not an eta Program" in err
    rc, _, err = _compile(capsys, f"{mod}:missing")
    assert rc == 2 and 'exports no "missing" (it exports build, notAProgram)' in err
    rc, _, err = _compile(capsys, str(mod))
    assert rc == 2 and "say which function" in err


def test_bad_container_files_are_clear_errors(capsys, tmp_path):
    bad = tmp_path / "bad.eta"
    bad.write_bytes(b"PIEETA\x01\x00")
    rc, _, err = _compile(capsys, str(bad))
    assert rc == 2 and "version 1" in err and "Fix:" in err
    rc, _, err = _compile(capsys, str(tmp_path / "absent.eta"))
    assert rc == 2 and "cannot read" in err
    good = tmp_path / "good.eta"
    good.write_bytes(rust_example("top_a"))
    rc, _, err = _compile(capsys, str(good), "--input", "f32[3]")
    assert rc == 2 and "--input is for Python functions" in err


def test_generate_sampler_program_flag_is_checked_before_the_model_loads(capsys, tmp_path):
    eta_file = tmp_path / "top_a.eta"
    eta_file.write_bytes(rust_example("top_a"))
    for extra, msg in ((["--temperature", "0.5"], "takes no --sampler, --temperature"),
                       (["--sampler", "top-k"], "takes no --sampler"),
                       (["--watermark", "3"], "cannot be combined")):
        rc = main(["generate", "hi", "--sampler-program", str(eta_file), *extra])
        assert rc == 2 and msg in capsys.readouterr().err
    rc = main(["generate", "hi", "--sampler-program", str(tmp_path / "nope.eta")])
    assert rc == 2 and "cannot read --sampler-program" in capsys.readouterr().err


def test_generate_with_a_rust_sampler_program(default_model, capsys, tmp_path, monkeypatch):
    import piegpu.textgen.model
    eta_file = tmp_path / "top_a.eta"
    eta_file.write_bytes(rust_example("top_a"))
    monkeypatch.setattr(piegpu.textgen.model, "load_model", lambda *a, **k: default_model)
    rc = main(["generate", "Once upon a time", "--max-tokens", "6", "--seed", "7", "--sampler-program", str(eta_file)])
    out = capsys.readouterr()
    assert rc == 0, out.err
    want = default_model.generate("Once upon a time", max_tokens=6, seed=7, sampler=eta_file.read_bytes()).run()
    assert out.out.strip() == want.strip() and f"sampler: program {TOP_A_HASH[:12]}" in out.err


def test_python_epilogue_reading_the_hidden_state_compiles_at_the_given_hidden_size(capsys, tmp_path):
    src = tmp_path / "hid.py"
    src.write_text("from piegpu import eta\nfrom piegpu.eta import intrinsics\n\n"
                   "def norm2():\n    h = intrinsics.output(0, 'hidden')\n    return eta.reduce_sum(h * h)\n")
    rc, out, err = _compile(capsys, f"{src}:norm2", "--target", "wgsl", "--hidden", "64")
    assert rc == 0, err
    assert "in_hidden" in out
    rc, wider, err = _compile(capsys, f"{src}:norm2", "--target", "wgsl", "--hidden", "128")
    assert rc == 0, err
    assert wider != out  # the hidden size is the traced input's shape
