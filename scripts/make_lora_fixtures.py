"""Regenerate tests/fixtures/lora/<case>/: random LoRA adapters made and applied by PEFT on the tiny family
checkpoints of tests/fixtures/models/ (transformers' own model classes, torch on the CPU, float32).

Per case: adapter_config.json + adapter_model.safetensors (PEFT's save_pretrained), and expected.npz with PEFT's
logits (the adapter unmerged, as PEFT runs it) at every position of the family fixture's 40-token sequence and 16
greedy tokens (full recomputation per step). The cases cover ranks, lora_alpha, use_rslora, rank_pattern and
alpha_pattern, target subsets, the families' steps (Llama 3, Qwen2's bias, Qwen3's q/k norm, Gemma 3's sandwich
norms and GeGLU) and an adapter stored in f16. tests/model/test_lora.py checks piegpu against these without torch.

Needs torch, transformers and peft, for this script only (never a test dependency):
    pip install torch transformers peft
    python3 scripts/make_lora_fixtures.py
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "models"
OUT = ROOT / "tests" / "fixtures" / "lora"
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
GREEDY = 16

# case -> (family, LoraConfig fields, dtype the adapter is saved in)
CASES = {
    "llama3_qv_r8": ("llama3", dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]), "float32"),
    "llama3_all_rslora": ("llama3", dict(r=4, lora_alpha=8, use_rslora=True, target_modules=ALL,
                                         rank_pattern={"down_proj": 8}, alpha_pattern={"o_proj": 2}), "float32"),
    "qwen2_mlp_r16_f16": ("qwen2", dict(r=16, lora_alpha=32, target_modules=["o_proj", "gate_proj", "up_proj",
                                                                            "down_proj"]), "float16"),
    "qwen3_qkv_r4": ("qwen3", dict(r=4, lora_alpha=4, target_modules=["q_proj", "k_proj", "v_proj"]), "float32"),
    "gemma3_all_r8": ("gemma3", dict(r=8, lora_alpha=8, target_modules=ALL), "float32"),
}


def greedy(model, ids: list) -> list:
    """GREEDY tokens by full recomputation (no cache, no stop rule)."""
    import torch
    seq = list(ids)
    with torch.no_grad():
        for _ in range(GREEDY):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    return seq[len(ids):]


def make_case(name: str, family: str, fields: dict, dtype: str, seed: int) -> None:
    import peft
    import torch
    import transformers
    base = transformers.AutoModelForCausalLM.from_pretrained(MODELS / family, dtype=torch.float32)
    model = peft.get_peft_model(base, peft.LoraConfig(**fields, lora_dropout=0.0, bias="none",
                                                      task_type="CAUSAL_LM"))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # PEFT starts B at zero: random A and B, big enough to move the logits
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
                if dtype == "float16":  # the saved f16 values, so the logits are those of the file
                    p.copy_(p.half().float())
    model.eval()
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    if dtype == "float16":
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.data = p.data.half()
    model.save_pretrained(out)
    if dtype == "float16":
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.data = p.data.float()
    ids = np.load(MODELS / family / "expected.npz")["ids"].tolist()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float().numpy()
    tokens = greedy(model, ids)
    np.savez_compressed(out / "expected.npz", ids=np.array(ids, np.int32), logits=logits.astype(np.float32),
                        greedy=np.array(tokens, np.int32))
    (out / "fixture.json").write_text(json.dumps({
        "family": family, "lora": {k: v for k, v in fields.items()}, "dtype": dtype, "seed": seed,
        "peft": peft.__version__, "transformers": transformers.__version__, "torch": torch.__version__}, indent=2))
    readme = out / "README.md"
    if readme.exists():
        readme.unlink()  # PEFT's model card template: nothing a test reads
    print(f"{name}: {family}, greedy {tokens}")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for i, (name, (family, fields, dtype)) in enumerate(CASES.items()):
        make_case(name, family, fields, dtype, seed=1000 + i)


if __name__ == "__main__":
    sys.exit(main())
