"""LoRA adapters against PEFT: random adapters made and applied by PEFT + transformers on the tiny family checkpoints
(scripts/make_lora_fixtures.py; torch is not needed here), their logits at every position of a 40-token sequence
and 16 greedy tokens stored in tests/fixtures/lora/<case>/expected.npz. piegpu (f32 KV) must match them; a GGUF
LoRA of the same weights (written here with gguf-py, q/k rows permuted as llama.cpp's converter does) too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import piegpu
from piegpu.errors import ModelError, ValidationError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CASES = {"llama3_qv_r8": "llama3", "llama3_all_rslora": "llama3", "qwen2_mlp_r16_f16": "qwen2",
         "qwen3_qkv_r4": "qwen3", "gemma3_all_r8": "gemma3"}
TOL = 1e-3  # as tests/model/test_families.py: f32 math, max abs logit error


def expected(case: str) -> dict:
    with np.load(FIXTURES / "lora" / case / "expected.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def models():
    loaded = {}

    def get(family: str, **kw):
        key = (family, tuple(sorted(kw.items())))
        if key not in loaded:
            loaded[key] = piegpu.load_model(FIXTURES / "models" / family, verbose=False, kv_dtype="f32", **kw)
        return loaded[key]
    yield get
    for m in loaded.values():
        m.close()


def adapter_of(model, case: str):
    return next((a for a in model.adapters if a.name == case), None) or model.load_adapter(FIXTURES / "lora" / case)


@pytest.mark.parametrize("case", CASES)
def test_logits_match_peft(models, case):
    m = models(CASES[case])
    e = expected(case)
    got = m.logits(e["ids"].tolist(), adapter=adapter_of(m, case))
    err = np.abs(got - e["logits"]).max()
    assert err < TOL, f"{case}: max abs error {err:.2e}"
    base = m.logits(e["ids"].tolist())
    assert np.abs(base - e["logits"]).max() > 100 * TOL  # the adapter moves the logits: the match means something
    # scale 0 == base (the adapted plan's unfused steps round differently from the fused base plan: f32 noise)
    assert np.abs(m.logits(e["ids"].tolist(), adapter=case, adapter_scale=0.0) - base).max() < 1e-4


@pytest.mark.parametrize("case", CASES)
def test_greedy_generation_matches_peft(models, case):
    m = models(CASES[case])
    e = expected(case)
    text = m.tokenizer.decode(e["ids"].tolist())
    gen = m.generate(text, max_tokens=16, adapter=adapter_of(m, case))
    gen.run()
    assert gen.tokens == e["greedy"].tolist()


def test_batch_of_mixed_adapters_equals_each_alone(models):
    # rows on three adapters and none, two rows a pass at most (rows join and leave: plans reseated), in one batch
    m = models("llama3")
    e = expected("llama3_qv_r8")
    text = m.tokenizer.decode(e["ids"].tolist())
    short = m.tokenizer.decode(e["ids"][:23].tolist())
    for case in ("llama3_qv_r8", "llama3_all_rslora"):
        adapter_of(m, case)
    if "half" not in [a.name for a in m.adapters]:
        m.load_adapter(FIXTURES / "lora" / "llama3_qv_r8", name="half")
    rows = [(text, "llama3_qv_r8", 1.0), (short, "llama3_all_rslora", 1.0), (text, None, 1.0),
            (short, "llama3_qv_r8", 1.0), (short, "half", 0.5)]
    alone = []
    for prompt, a, scale in rows:
        g = m.generate(prompt, max_tokens=12, adapter=a, adapter_scale=scale)
        g.run()
        alone.append(g.tokens)
    assert alone[0] == e["greedy"][:12].tolist()
    assert len({tuple(t) for t in alone}) == len(rows)  # every adapter (and scale) changes the tokens
    gens = m.generate_batch([p for p, _, _ in rows[:4]], max_tokens=12, adapters=[a for _, a, _ in rows[:4]],
                            max_batch=2)
    assert [g.tokens for g in gens] == alone[:4]
    # another mix of the same adapters compiles nothing new
    compiled = len(m.gpu.lib)
    gens = m.generate_batch([rows[3][0], rows[2][0], rows[1][0]], max_tokens=12,
                            adapters=["llama3_qv_r8", None, "llama3_all_rslora"], max_batch=2)
    assert [g.tokens for g in gens] == [alone[3], alone[2], alone[1]]
    assert len(m.gpu.lib) == compiled
    # n samples of one prompt fork its working set: the forks keep its adapter and scale
    samples = m.generate(rows[4][0], max_tokens=12, adapter="half", adapter_scale=0.5, n=2)
    samples.run()
    assert [g.tokens for g in samples.samples] == [alone[4], alone[4]]


def test_merged_equals_unmerged(tmp_path):
    m = piegpu.load_model(FIXTURES / "models" / "llama3", verbose=False, kv_dtype="f32")
    try:
        e = expected("llama3_all_rslora")
        a = m.load_adapter(FIXTURES / "lora" / "llama3_all_rslora")
        unmerged = m.logits(e["ids"].tolist(), adapter=a)
        m.merge_adapter(a)
        assert m.adapters == []  # merged adapters leave the registry
        merged = m.logits(e["ids"].tolist())
        assert np.abs(merged - unmerged).max() < 1e-4
        assert np.abs(merged - e["logits"]).max() < TOL
        text = m.tokenizer.decode(e["ids"].tolist())
        g = m.generate(text, max_tokens=16)
        g.run()
        assert g.tokens == e["greedy"].tolist()
    finally:
        m.close()


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf LlamaModel.permute (q/k rows for its RoPE), as it applies it to lora_b."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf_lora(case: str, path: Path, arch: str = "llama") -> None:
    """The PEFT adapter `case` as llama.cpp's convert_lora_to_gguf writes it (tensor names, alpha, permuted q/k B)."""
    import gguf
    from piegpu.model import safetensors_io as st
    d = FIXTURES / "lora" / case
    cfg = json.loads((d / "adapter_config.json").read_text())
    base = json.loads((FIXTURES / "models" / CASES[case] / "config.json").read_text())
    names = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
             "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
    w = gguf.GGUFWriter(str(path), arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(cfg["lora_alpha"]))
    f = d / "adapter_model.safetensors"
    for key, entry in st.read_header(f).items():
        parts = key.split(".")
        layer, target, ab = int(parts[parts.index("layers") + 1]), parts[-3], parts[-2]
        t = st.read_tensor(f, entry)
        if ab == "lora_B" and target in ("q_proj", "k_proj"):
            t = _permute(t, base["num_attention_heads"] if target == "q_proj" else base["num_key_value_heads"])
        w.add_tensor(f"blk.{layer}.{names[target]}.weight.{ab.lower()}", np.ascontiguousarray(t, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_lora_gives_peft_logits(models, tmp_path):
    m = models("llama3")
    write_gguf_lora("llama3_qv_r8", tmp_path / "qv.gguf")
    a = m.load_adapter(tmp_path / "qv.gguf", name="qv-gguf")
    e = expected("llama3_qv_r8")
    assert np.abs(m.logits(e["ids"].tolist(), adapter=a) - e["logits"]).max() < TOL
    m.unload_adapter(a)
    write_gguf_lora("llama3_qv_r8", tmp_path / "qwen.gguf", arch="qwen2")
    with pytest.raises(ModelError, match="for a 'qwen2' model but the base model is LlamaForCausalLM"):
        m.load_adapter(tmp_path / "qwen.gguf")


def _broken(tmp_path, case: str, edit_config=None, edit_tensors=None) -> Path:
    from piegpu.model import safetensors_io as st
    src, d = FIXTURES / "lora" / case, tmp_path / "bad"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    cfg = json.loads((src / "adapter_config.json").read_text())
    if edit_config:
        edit_config(cfg)
    (d / "adapter_config.json").write_text(json.dumps(cfg))
    f = src / "adapter_model.safetensors"
    tensors = {k: st.read_tensor(f, e) for k, e in st.read_header(f).items()}
    if edit_tensors:
        edit_tensors(tensors)
    from safetensors.numpy import save_file
    save_file(tensors, str(d / "adapter_model.safetensors"))
    return d


def test_bad_adapters_are_refused_clearly_and_the_base_keeps_serving(models, tmp_path):
    m = models("llama3")
    A = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    B = A.replace("lora_A", "lora_B")
    bad = {
        "rank 8 but adapter_config.json says r = 4": dict(edit_config=lambda c: c.update(r=4)),
        "lora_B is missing": dict(edit_tensors=lambda t: t.pop(B)),
        "which the base model has no projection": dict(
            edit_tensors=lambda t: t.update({A.replace("q_proj", "z_proj"): t[A]})),
        "an adapter for another model size": dict(edit_tensors=lambda t: t.update({A: t[A][:, :32]})),
        "disagree on the rank": dict(edit_tensors=lambda t: t.update({B: t[B][:, :4]})),
        "modules_to_save": dict(edit_config=lambda c: c.update(modules_to_save=["lm_head"])),
        "use_dora": dict(edit_config=lambda c: c.update(use_dora=True)),
        "the base model has 3 layers": dict(edit_tensors=lambda t: t.update(
            {A.replace("layers.0", "layers.7"): t[A], B.replace("layers.0", "layers.7"): t[B]})),
    }
    for message, edits in bad.items():
        with pytest.raises(ModelError, match=message):
            m.load_adapter(_broken(tmp_path, "llama3_qv_r8", **edits))
    with pytest.raises(ModelError, match="no such adapter"):
        m.load_adapter(tmp_path / "nowhere")
    with pytest.raises(ValidationError, match="no adapter named 'nope' is loaded; loaded:"):
        m.generate("x", adapter="nope")
    with pytest.raises(ValidationError, match="adapter_scale must be a finite number"):
        m.generate("x", adapter=adapter_of(m, "llama3_qv_r8"), adapter_scale=float("nan"))
    e = expected("llama3_qv_r8")
    assert np.abs(m.logits(e["ids"].tolist()) - np.load(FIXTURES / "models" / "llama3" / "expected.npz")["logits"]
                  ).max() < TOL


def test_slots_are_reused_least_recent_first_and_held_while_in_use():
    m = piegpu.load_model(FIXTURES / "models" / "llama3", verbose=False, kv_dtype="f32", max_loras=1)
    try:
        e = expected("llama3_qv_r8")
        a, b = (m.load_adapter(FIXTURES / "lora" / c) for c in ("llama3_qv_r8", "llama3_all_rslora"))
        assert np.abs(m.logits(e["ids"].tolist(), adapter=a) - e["logits"]).max() < TOL
        eb = expected("llama3_all_rslora")
        assert np.abs(m.logits(e["ids"].tolist(), adapter=b) - eb["logits"]).max() < TOL  # a evicted for b
        assert np.abs(m.logits(e["ids"].tolist(), adapter=a) - e["logits"]).max() < TOL  # and back
        ws = m.working_set(64)
        ws.set_adapter(a.name, a.weights)
        with pytest.raises(ValidationError, match="all 1 LoRA slots hold adapters that running sequences use"):
            m.logits(e["ids"].tolist(), adapter=b)
        with pytest.raises(ValidationError, match="in use by running sequences"):
            m.unload_adapter(a)
        ws.release()
        m.unload_adapter(a)
        assert [x.name for x in m.adapters] == ["llama3_all_rslora"]
    finally:
        m.close()
