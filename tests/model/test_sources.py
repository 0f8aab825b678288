"""Models by name: a fabricated Hugging Face cache (huggingface_hub's layout), Ollama store and LM Studio folder,
offline (HF_HUB_OFFLINE), resolved, loaded, listed by `piegpu models`, and refused with clear errors."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from modeltest_helpers import gguf_tiny_config, random_weights, write_tiny_gguf
from piegpu.errors import ModelError

REV = "0123456789abcdef0123456789abcdef01234567"  # the cached commit of every fabricated repo


def _hf_repo(hub: Path, repo_id: str, files: dict[str, Path], rev: str = REV) -> Path:
    """A repo in huggingface_hub's cache layout: blobs by hash, snapshots/REV/ symlinks, refs/main."""
    root = hub / ("models--" + repo_id.replace("/", "--"))
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(rev)
    for name, src in files.items():
        data = src.read_bytes()
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = root / "snapshots" / rev / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return root / "snapshots" / rev


def _ollama_model(store: Path, name: str, tag: str, gguf: Path, params: dict | None = None) -> Path:
    """A model as `ollama pull` leaves it: sha256-HEX blobs and a Docker-style manifest naming them."""
    def blob(data: bytes, media: str) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        (store / "blobs").mkdir(parents=True, exist_ok=True)
        (store / "blobs" / f"sha256-{digest}").write_bytes(data)
        return {"mediaType": media, "digest": f"sha256:{digest}", "size": len(data)}
    layers = [blob(gguf.read_bytes(), "application/vnd.ollama.image.model"),
              blob(b"{{ .Prompt }}", "application/vnd.ollama.image.template"),
              blob(json.dumps(params or {"stop": ["<|im_end|>"]}).encode(), "application/vnd.ollama.image.params")]
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": blob(b"{}", "application/vnd.docker.container.image.v1+json"), "layers": layers}
    path = store / "manifests" / "registry.ollama.ai" / "library" / name / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return path


def _tree(root: Path) -> dict:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    """Tiny GGUFs in two quantizations, a split one, and a safetensors directory (converted from one of them)."""
    from piegpu.model.gguf_convert import convert_gguf
    d = tmp_path_factory.mktemp("models")
    config = gguf_tiny_config(num_hidden_layers=2)
    weights = random_weights(config, seed=3)
    out = {q: write_tiny_gguf(d / f"tiny-{q}.gguf", config, weights, q) for q in ("Q8_0", "Q4_0")}
    split = d / "split"
    split.mkdir()
    write_tiny_gguf(split / "tiny-Q5_0.gguf", config, weights, "Q5_0", split_max_tensors=12)
    out["split"] = sorted(split.iterdir())
    out["dir"] = convert_gguf(out["Q8_0"], d / "tiny-st", quiet=True)
    return out


@pytest.fixture
def stores(files, tmp_path, monkeypatch) -> dict:
    """HF cache, Ollama store, LM Studio folder and an empty piegpu cache, offline, for this test."""
    from huggingface_hub import constants as hub_constants
    hub = tmp_path / "hf" / "hub"
    snap = _hf_repo(hub, "testorg/tiny-GGUF", {"tiny-Q8_0.gguf": files["Q8_0"], "tiny-Q4_0.gguf": files["Q4_0"],
                                               "mmproj-tiny-f16.gguf": files["Q8_0"], "README.md": files["Q8_0"]})
    _hf_repo(hub, "testorg/split-GGUF", {p.name: p for p in files["split"]})
    _hf_repo(hub, "testorg/tiny-st", {p.name: p for p in Path(files["dir"]).iterdir() if p.is_file()})
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    ollama = tmp_path / "ollama"
    _ollama_model(ollama, "tiny", "latest", files["Q8_0"])
    _ollama_model(ollama, "tiny", "q4", files["Q4_0"])
    lms = tmp_path / "lmstudio"
    (lms / "pub" / "tiny-GGUF").mkdir(parents=True)
    for q in ("Q8_0", "Q4_0"):
        shutil.copy(files[q], lms / "pub" / "tiny-GGUF" / f"tiny-{q}.gguf")
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama))
    monkeypatch.setenv("LMSTUDIO_MODELS", str(lms))
    monkeypatch.setenv("PIEGPU_CACHE_DIR", str(tmp_path / "piegpu"))
    return {"hub": hub, "snap": snap, "ollama": ollama, "lmstudio": lms}


def test_names_resolve_to_the_right_file(stores, files):
    from piegpu.model.sources import resolve
    said = []
    r = resolve("testorg/tiny-GGUF", said.append)  # no Q4_K_M: the fewest Q4-Q8 bits, and it says so
    assert (r.path.name, r.origin, r.is_gguf) == ("tiny-Q4_0.gguf", "hf", True)
    assert "Q4_0" in said[0] and "smallest Q4-Q8" in said[0]
    assert resolve("hf:testorg/tiny-GGUF:q8_0").path.name == "tiny-Q8_0.gguf"  # llama.cpp's -hf: any case
    r = resolve(f"testorg/tiny-GGUF@{REV}:Q8_0")
    assert r.path.name == "tiny-Q8_0.gguf" and r.name == f"testorg/tiny-GGUF:Q8_0@{REV}"
    assert resolve("testorg/split-GGUF").path.name == "tiny-Q5_0-00001-of-00002.gguf"
    r = resolve("testorg/tiny-st")
    assert r.path == stores["hub"] / "models--testorg--tiny-st" / "snapshots" / REV and not r.is_gguf
    r = resolve("ollama:tiny")
    assert r.path.read_bytes() == files["Q8_0"].read_bytes() and r.extra["params"] == {"stop": ["<|im_end|>"]}
    assert resolve("ollama:tiny:q4").path.read_bytes() == files["Q4_0"].read_bytes()
    assert resolve("lmstudio:pub/tiny-GGUF:Q8_0").path == stores["lmstudio"] / "pub" / "tiny-GGUF" / "tiny-Q8_0.gguf"
    # a local path wins over a name that looks like a repo id
    local = Path("testorg") / "tiny-GGUF"
    cwd = os.getcwd()
    try:
        os.chdir(stores["lmstudio"].parent)
        local.mkdir(parents=True)
        assert resolve("testorg/tiny-GGUF").origin == "path"
    finally:
        os.chdir(cwd)


def test_split_gguf_reads_every_shard(files):
    from piegpu.model.facts import facts_of_gguf
    from piegpu.model.gguf_file import GgufFile
    first, second = files["split"]
    g = GgufFile(first)
    assert len(g.maps) == 2 and len(g.tensors) == len(GgufFile(files["Q8_0"]).tensors)
    assert facts_of_gguf(first, "path", "x")["size_bytes"] == first.stat().st_size + second.stat().st_size
    with pytest.raises(ModelError, match="shard 2 of a split GGUF; open the first"):
        GgufFile(second)
    lone = first.parent.parent / "lone"
    lone.mkdir(exist_ok=True)
    shutil.copy(first, lone / first.name)
    with pytest.raises(ModelError, match="shard 2 of 2 .* is missing"):
        GgufFile(lone / first.name)


def test_load_by_name_gives_the_files_model(stores, files):
    import piegpu
    before = {k: _tree(stores[k]) for k in ("ollama", "lmstudio", "hub")}
    ids = [1, 5, 9, 3]
    with piegpu.load_model(files["Q8_0"], verbose=False) as m:
        want = m.logits(ids)
    names = {"testorg/tiny-GGUF:q8_0": ("testorg/tiny-GGUF:Q8_0", "hf"), "ollama:tiny": ("ollama:tiny:latest", "ollama"),
             "lmstudio:pub/tiny-GGUF:Q8_0": ("lmstudio:pub/tiny-GGUF:Q8_0", "lmstudio")}
    for name, (canonical, origin) in names.items():
        with piegpu.load_model(name, verbose=False) as m:
            np.testing.assert_array_equal(m.logits(ids), want)
            info = m.info
            assert (info["name"], info["origin"], info["quantization"], info["vocab_size"]) == \
                (canonical, origin, "Q8_0", m.config.vocab_size)
            assert info["tensor_types"]["Q8_0"] >= 14 and info["chat_template"] and info["context"] == m.context
    with piegpu.load_model("testorg/tiny-st", verbose=False) as m:  # the same weights as f32 safetensors
        np.testing.assert_allclose(m.logits(ids), want, rtol=0, atol=2e-3 * np.abs(want).max())
        assert m.info["format"] == "safetensors" and m.info["origin"] == "hf"
    with piegpu.load_model("testorg/split-GGUF", verbose=False) as m:
        assert m.info["quantization"] == "Q5_0" and np.isfinite(m.logits(ids)).all()
    assert {k: _tree(stores[k]) for k in ("ollama", "lmstudio", "hub")} == before  # read, never written


def test_piegpu_models_lists_each_store(stores, files, capsys):
    from piegpu.cli import main
    before = {k: _tree(stores[k]) for k in ("ollama", "lmstudio")}
    mlx = {p.name: p for p in Path(files["dir"]).iterdir() if p.is_file()}  # an mlx-lm 4-bit repo's config
    config = json.loads(mlx["config.json"].read_text())
    mlx["config.json"] = stores["hub"].parent / "config.json"
    mlx["config.json"].write_text(json.dumps({**config, "quantization": {"group_size": 64, "bits": 4}}))
    _hf_repo(stores["hub"], "mlx-community/tiny-4bit", mlx)
    assert main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    for name in ("testorg/tiny-GGUF:Q8_0", "testorg/tiny-GGUF:Q4_0", "testorg/split-GGUF:Q5_0", "testorg/tiny-st",
                 "ollama:tiny:latest", "ollama:tiny:q4", "lmstudio:pub/tiny-GGUF:Q8_0", "lmstudio:pub/tiny-GGUF:Q4_0"):
        r = rows[name]
        assert r["runnable"] and r["reason"] == "" and r["architecture"] == "LlamaForCausalLM", r
        assert r["size_bytes"] > 0 and r["parameters"] > 0 and r["vocab_size"] > 0 and Path(r["path"]).exists()
    assert rows["testorg/tiny-st"]["quantization"] == "F32" and rows["ollama:tiny:q4"]["quantization"] == "Q4_0"
    assert not any("mmproj" in n for n in rows)
    assert not rows["mlx-community/tiny-4bit"]["runnable"] and "MLX" in rows["mlx-community/tiny-4bit"]["reason"]
    assert main(["models"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:4] == ["NAME", "ARCH", "PARAMS", "QUANT"] and "ollama:tiny:q4" in table
    # a damaged manifest is listed as not runnable, with the reason; nothing in the other tools' stores changed
    bad = stores["ollama"] / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    assert main(["models", "--json"]) == 0
    row = {r["name"]: r for r in json.loads(capsys.readouterr().out)}["ollama:broken:latest"]
    assert not row["runnable"] and "manifest" in row["reason"] and "damaged" in row["reason"]
    bad.unlink()
    assert {k: _tree(stores[k]) for k in ("ollama", "lmstudio")} == before


def test_bad_names_say_what_exists(stores, files):
    from piegpu.model.sources import resolve
    with pytest.raises(ModelError, match=r"no GGUF in Q6_K; it has: Q4_0 \(tiny-Q4_0.gguf\), Q8_0"):
        resolve("testorg/tiny-GGUF:Q6_K")
    with pytest.raises(ModelError, match="not in the Hugging Face cache .*HF_HUB_OFFLINE"):
        resolve("testorg/absent")
    with pytest.raises(ModelError, match="safetensors repository .* no :Q4_K_M"):
        resolve("testorg/tiny-st:Q4_K_M")
    with pytest.raises(ModelError, match=r"not pulled .*ollama:tiny:latest, ollama:tiny:q4.*ollama pull nope:latest"):
        resolve("ollama:nope")
    with pytest.raises(ModelError, match="no such model file or folder, and not a model name.*ollama:tiny:q4"):
        resolve("not a model")
    folder = stores["lmstudio"] / "pub" / "tiny-GGUF"
    shutil.copy(files["Q8_0"], folder / "tiny-v2-Q8_0.gguf")
    with pytest.raises(ModelError, match="ambiguous .*tiny-Q8_0.gguf.*tiny-v2-Q8_0.gguf.*QUANT"):
        resolve("lmstudio:pub/tiny-GGUF:Q8_0")
    manifest = stores["ollama"] / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "q4"
    layer = json.loads(manifest.read_text())["layers"][0]
    blob = stores["ollama"] / "blobs" / layer["digest"].replace(":", "-")
    data = blob.read_bytes()
    blob.write_bytes(data[:1000])
    with pytest.raises(ModelError, match="holds 1000 bytes, its manifest says .*ollama pull tiny:q4"):
        resolve("ollama:tiny:q4")
    blob.unlink()
    with pytest.raises(ModelError, match="model blob .* is missing.*ollama pull tiny:q4"):
        resolve("ollama:tiny:q4")
    manifest.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.license"}]}))
    with pytest.raises(ModelError, match="no model layer"):
        resolve("ollama:tiny:q4")


def _response(errors, status: int):
    """An HTTP response of the library huggingface_hub's errors are built on (httpx or its successor)."""
    import importlib
    http = importlib.import_module(errors.Response.__module__.split(".")[0])
    return http.Response(status, request=http.Request("GET", "https://huggingface.co/api/models/org/gated"))


class _File:
    def __init__(self, path: str, size: int):
        self.path, self.size = path, size


def test_download_calls_huggingface_hub(stores, files, monkeypatch, capsys):
    """Online: the file list from HfApi, each shard of the chosen quantization fetched with hf_hub_download (repo,
    filename, revision) and piegpu's progress bar; a gated repo's error is explained."""
    import huggingface_hub
    from huggingface_hub import constants as hub_constants, errors
    from piegpu.model.sources import resolve
    from piegpu.runtime.progress import Bar
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    listed = {"org/big-GGUF": ["big-Q8_0.gguf", "Q4_K_M/big-Q4_K_M-00001-of-00002.gguf",
                               "Q4_K_M/big-Q4_K_M-00002-of-00002.gguf", "mmproj-big-f16.gguf", "README.md"]}
    calls = []

    def tree(self, repo_id, revision=None, recursive=False, **kw):
        assert recursive
        if repo_id not in listed:
            raise errors.GatedRepoError("401 Client Error: access to model org/gated is restricted",
                                        response=_response(errors, 401))
        return [_File(p, 100) for p in listed[repo_id]]

    def download(repo_id, filename, revision=None, tqdm_class=None, **kw):
        calls.append((repo_id, filename, revision, tqdm_class))
        return str(files["Q8_0"])
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_tree", tree)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    assert resolve("org/big-GGUF@v1.0").path == files["Q8_0"]
    assert calls == [("org/big-GGUF", f"Q4_K_M/big-Q4_K_M-0000{i}-of-00002.gguf", "v1.0", Bar) for i in (1, 2)]
    calls.clear()
    resolve("org/big-GGUF:Q8_0")
    assert calls == [("org/big-GGUF", "big-Q8_0.gguf", None, Bar)]
    with pytest.raises(ModelError, match="gated repository.*accept the terms.*HF_TOKEN"):
        resolve("org/gated")
    from piegpu.cli import main
    from piegpu.server import served_model_id
    assert main(["models", "pull", "org/big-GGUF:Q8_0"]) == 0
    assert capsys.readouterr().out.strip() == str(files["Q8_0"])
    assert main(["models", "pull", "ollama:tiny"]) == 2 and "never writes" in capsys.readouterr().err
    model = type("M", (), {"info": {"origin": "hf", "name": "org/big-GGUF:Q8_0"}, "source": str(files["Q8_0"])})
    assert served_model_id(model, "org/big-GGUF:q8_0") == "org/big-GGUF:Q8_0"  # the server answers to the name


def test_progress_bar_only_on_a_terminal(monkeypatch):
    from piegpu.runtime import progress

    class Tty(io.StringIO):
        def isatty(self):
            return True
    for stream, shown in ((Tty(), True), (io.StringIO(), False)):
        monkeypatch.setattr("sys.stderr", stream)
        with progress.bar(3, "uploading weights", unit="layer") as b:
            b.update(3)
        assert ("uploading weights" in stream.getvalue()) == shown, stream.getvalue()
    tty = Tty()
    monkeypatch.setattr("sys.stderr", tty)
    with progress.quiet(), progress.bar(3, "quiet work") as b:
        b.update(3)
    assert tty.getvalue() == ""


def test_progress_as_log_lines(monkeypatch, capsys):
    """`piegpu serve` logs progress as whole lines (no carriage returns), and work quicker than the delay writes none."""
    from piegpu.runtime import progress
    monkeypatch.setattr(progress, "_lines", [True])
    monkeypatch.setattr(progress, "LINE_DELAY_S", 0.0)
    with progress.bar(2, "downloading x.gguf", unit="B") as b:
        b.update(2)
    err = capsys.readouterr().err
    assert "\r" not in err and err.splitlines()[-1].startswith("piegpu: downloading x.gguf: 100%"), err
    monkeypatch.setattr(progress, "LINE_DELAY_S", 60.0)
    with progress.bar(2, "quick work") as b:
        b.update(2)
    assert capsys.readouterr().err == ""
