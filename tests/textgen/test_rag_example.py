"""examples/rag.py: its index embeds each passage once, re-embeds only changed files, drops deleted ones, retrieves
a passage by its own text first, and the whole example answers from a folder with the default chat model."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import piegpu

pytest.importorskip("sentence_transformers", reason="sentence-transformers (builds the test's embedder) is not "
                    "installed: pip install -e .[test]")
from tests.fixtures.encoders import make_embedder  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NOTES = {"paris.txt": "paris is the capital of france . the river runs through the old city . " * 3,
         "pets.md": "the cat sat on the mat while the dog was out in the rain .",
         "sky.txt": "blue sky , rain and a river : the weather of the city was good that year ."}


def _rag():
    spec = importlib.util.spec_from_file_location("rag_example", ROOT / "examples" / "rag.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def embedder(gpu, tmp_path_factory):
    with piegpu.load_model(str(make_embedder(tmp_path_factory.mktemp("rag-embedder"))), verbose=False) as m:
        yield m


def test_the_index_embeds_once_updates_changed_files_and_retrieves(embedder, tmp_path):
    rag = _rag()
    folder = tmp_path / "notes"
    folder.mkdir()
    for name, text in NOTES.items():
        (folder / name).write_text(text)
    calls = []

    def embed(xs):
        calls.append(len(xs))
        return embedder.embed(xs, truncate=True)
    index = rag.Index(tmp_path / "index.npz")
    first = index.update(folder, embed, words=12)
    assert first == len(index.texts) > 3 and set(index.sources) == set(NOTES)
    again = rag.Index(tmp_path / "index.npz")  # read back from disk
    assert again.update(folder, embed, words=12) == 0 and again.texts == index.texts
    np.testing.assert_array_equal(again.vectors, index.vectors)
    (folder / "pets.md").write_text("the dog sat on the mat .")
    (folder / "sky.txt").unlink()
    assert again.update(folder, embed, words=12) == 1  # only the changed file's one passage
    assert set(again.sources) == {"paris.txt", "pets.md"}
    target = again.texts[again.sources.index("pets.md")]
    score, src, text = again.search(embed([target])[0], 2)[0]
    assert (src, text) == ("pets.md", target) and score > 0.999


def test_the_example_answers_from_a_folder(default_model, embedder, tmp_path, capsys):
    rag = _rag()
    folder = tmp_path / "notes"
    folder.mkdir()
    for name, text in NOTES.items():
        (folder / name).write_text(text)
    assert rag.main([str(folder), "what is the capital of france?", "--embedder", embedder.source,
                     "--max-tokens", "6", "--words", "12"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() and "passages from 3 files" in err and (folder / ".piegpu-index.npz").exists()
