"""What the default model really runs: the shader specialisations it composes and real logits.

A private model instance (so no kernel or plan cached by an earlier test hides a
specialisation) runs a prefill + decode generation, a batch of two prompts and a logits
prefill while ShaderLibrary.kernel is wrapped to record every (shader, parameters, snippets).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from piegpu.model import shaders
from piegpu.errors import CompileError
from piegpu.model.shaders import compose

PROMPT = "Once upon a time, in a small village by the sea, there lived"


@dataclass
class Capture:
    """Recorded shader specialisations [(name, params, snippets)] and real logits [rows, vocab]."""

    specs: list
    logits: np.ndarray
    prompt_ids: list
    config: object  # the model's config (dimensions for specialisations it does not reach)


def capture(load_model) -> Capture:
    """Run the default model (from `load_model()`) with ShaderLibrary.kernel recorded."""
    calls: dict = {}
    original = shaders.ShaderLibrary.kernel

    def recording(self, name, params, snippets=None):
        key = (name, tuple(sorted((k, repr(v)) for k, v in params.items())), tuple(sorted((snippets or {}).items())))
        calls.setdefault(key, (name, dict(params), dict(snippets or {})))
        return original(self, name, params, snippets)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shaders.ShaderLibrary, "kernel", recording)
        with load_model() as model:
            model.generate(PROMPT, max_tokens=4).run()
            model.generate_batch(["Hello there", "The capital of France is"], max_tokens=3)
            ids = model.tokenizer.encode(PROMPT).ids
            logits = np.asarray(model.logits(ids), np.float32)
        config = model.config
    return Capture(list(calls.values()), logits, ids, config)


def snippet_files(slot: str) -> list:
    """The snippet names of a slot's folder: FORMAT -> ["formats/f16", ...], EPILOGUE -> ["epilogues/..."]."""
    folder = {"FORMAT": "formats", "EPILOGUE": "epilogues"}[slot]
    return sorted(f"{folder}/{f.name[:-5]}" for f in (shaders.shader_root() / folder).iterdir()
                  if f.name.endswith(".wgsl"))


def with_every_snippet(specs: list) -> list:
    """specs, plus every FORMAT and EPILOGUE snippet the recorded ones lack, each composed once per shader.

    A missing snippet (another weight format, another family's activation) goes into the
    smallest recorded specialisation of each shader whose parameters it needs are all there
    (compose() refuses unfilled ones): the unrolled matmul tiles take seconds each to compile
    in SwiftShader, so not every recorded one is repeated.
    """
    out = list(specs)
    have = {(n, slot, sn[slot]) for n, _, sn in specs for slot in sn}
    for slot in ("FORMAT", "EPILOGUE"):
        for snippet in snippet_files(slot):
            for name in sorted({n for n, _, sn in specs if slot in sn}):
                if (name, slot, snippet) in have:
                    continue
                fits = []
                for n, params, sn in specs:
                    if n == name and slot in sn:
                        try:
                            fits.append((len(compose(n, params, {**sn, slot: snippet})), params, {**sn, slot: snippet}))
                        except CompileError:
                            pass
                if fits:
                    _, params, sn = min(fits, key=lambda f: f[0])
                    out.append((name, params, sn))
                    have.add((name, slot, snippet))
    return out
