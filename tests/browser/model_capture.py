"""What the default model really runs: its shader specialisations, its epilogues, and real logits.

A private model instance (so no kernel or plan cached by an earlier test hides a
specialisation) runs a prefill + decode generation per sampler, a batch of two prompts, a
logits prefill (and the batch again with f32 K and V, which lavapipe keeps in textures) and
examples/top_a.py's decode loop while ShaderLibrary.kernel and the
pipeline's compile_program are wrapped to record every (shader, parameters, snippets) and
every epilogue program (channels, intrinsics and all) the runtime compiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncio
import contextlib
import importlib.util
import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from piegpu.errors import CompileError
from piegpu.model import shaders
from piegpu.model.gpu_weights import TEXTURE_TEXELS
from piegpu.model.shader_code import four_rows, matvec_rows, tile_code
from piegpu.model.shaders import compose
from piegpu.runtime import pipeline

PROMPT = "Once upon a time, in a small village by the sea, there lived"
SAMPLERS = ("greedy", "top-k", "top-p", "min-p", "top-a")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str):
    """examples/<name>.py as a module (the examples are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@dataclass
class Capture:
    """Recorded shader specialisations [(name, params, snippets)] and real logits [rows, vocab]."""

    specs: list
    logits: np.ndarray
    prompt_ids: list
    config: object  # the model's config (dimensions for specialisations it does not reach)
    epilogues: list  # [(label, eta Program)] every epilogue the pipeline compiled, in order


def capture(load_model, load_exact=None) -> Capture:
    """Run the default model (from `load_model()`) with shader composition and epilogue compiles recorded; with
    `load_exact` (the model with f32 K and V, as pages of their own kind) its batch too."""
    calls: dict = {}
    programs: dict = {}
    kernel, compile_program = shaders.ShaderLibrary.kernel, pipeline.compile_program
    phase = ["generate"]

    def recording(self, name, params, snippets=None):
        key = (name, tuple(sorted((k, repr(v)) for k, v in params.items())), tuple(sorted((snippets or {}).items())))
        calls.setdefault(key, (name, dict(params), dict(snippets or {})))
        return kernel(self, name, params, snippets)

    def recording_compile(prog, target="wgsl", dev=None):
        programs.setdefault(prog.hash, (f"{phase[0]}-{len(programs)}", prog))
        return compile_program(prog, target, dev)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shaders.ShaderLibrary, "kernel", recording)
        mp.setattr(pipeline, "compile_program", recording_compile)
        with load_model() as model:
            for sampler in SAMPLERS:
                phase[0] = sampler
                model.generate(PROMPT, max_tokens=3, sampler=sampler, seed=3).run()
            phase[0] = "batch"
            model.generate_batch(["Hello there", "The capital of France is"], max_tokens=3)
            ids = model.tokenizer.encode(PROMPT).ids
            logits = np.asarray(model.logits(ids), np.float32)
            config = model.config
        if load_exact is not None:
            phase[0] = "batch-f32"
            with load_exact() as exact:
                exact.generate_batch(["Hello there", "The capital of France is"], max_tokens=3)
        phase[0] = "examples/top_a.py"
        # On a worker thread with a loop of its own, whether or not the caller's thread runs one.
        example = load_example("top_a")
        with contextlib.redirect_stdout(io.StringIO()), ThreadPoolExecutor(1) as pool:  # it streams its text
            pool.submit(asyncio.run, example.main("Once upon a time", 3, 7)).result()
    return Capture(list(calls.values()), logits, ids, config, list(programs.values()))


def snippet_files(slot: str) -> list:
    """The snippet names of a slot's folder: FORMAT -> ["formats/f16", ...], EPILOGUE -> ["epilogues/..."]."""
    folder = {"FORMAT": "formats", "EPILOGUE": "epilogues"}[slot]
    return sorted(f"{folder}/{f.name[:-5]}" for f in (shaders.shader_root() / folder).iterdir()
                  if f.name.endswith(".wgsl"))


def for_snippets(params: dict, snippets: dict) -> dict:
    """params with their generated row code redone for the FORMAT and EPILOGUE `snippets`: lavapipe's texture
    formats read 4 rows' scales in one fetch (shader_code.four_rows) and a block's quants as whole texels
    (tile_code's texels), which the other formats' snippets do not define, and an epilogue takes the rows a
    call it defines a function for (rope_kv: epilogue4, four; others two; shaders.rows_per_call,
    shader_code.epilogue_calls). CompileError where R does not fit the epilogue's calls."""
    if "FORMAT" not in snippets or "EPILOGUE" not in snippets:
        return params
    fmt = snippets["FORMAT"].split("/")[-1]
    per_call = shaders.rows_per_call(snippets["EPILOGUE"])
    four = fmt.endswith("_tex") and four_rows(fmt, params["R"], params["ROWS"])
    out = dict(params)
    try:
        if "ROW_DOTS" in params:
            out.update(matvec_rows(params["R"], four, per_call))
        if "TILE" in params:
            out["TILE"] = tile_code(params["R"], params["TB"], 8 if params.get("LANE") else 0, four,
                                    "norm_w" in params.get("X_BINDING", ""), per_call, TEXTURE_TEXELS.get(fmt, 0))
    except ValueError as e:
        raise CompileError(str(e)) from e
    return out


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
                        with_it = {**sn, slot: snippet}
                        try:
                            params = for_snippets(params, with_it)
                            fits.append((len(compose(n, params, with_it)), params, with_it))
                        except CompileError:
                            pass
                if fits:
                    _, params, sn = min(fits, key=lambda f: f[0])
                    out.append((name, params, sn))
                    have.add((name, slot, snippet))
    return out
