"""Regenerate tests/fixtures/models/<family>/: tiny random checkpoints made with transformers' own model classes.

Per family: config.json + model.safetensors (saved by save_pretrained, float32), a tiny byte-level
BPE tokenizer.json, and expected.npz with transformers' logits (torch, CPU, float32) at every
position of a 40-token sequence plus 16 greedy tokens (full recomputation per step, no stop token).
tests/model/test_families.py checks piegpu and the numpy reference against these without torch.

Needs torch and transformers, for this script only (never a test dependency):
    pip install torch==2.13.0 transformers     # the CPU build of torch; never a CUDA one
    python3 scripts/make_model_fixtures.py

`--tokenizers` writes tests/fixtures/models/tokenizers/ instead (tokenizers + transformers, no torch):
each family's tokenizer.json as its released checkpoints have it -- Llama 3 and Qwen2 byte-level BPE
with their split regexes (Llama 3's ignore_merges, Qwen2's NFC), Llama 2 / Mistral and Gemma
SentencePiece BPE (byte fallback, (Prepend +) Replace normalizers, merges from piece scores by
transformers' own generate_merges) -- trained on the committed texts, small vocabularies. For the
SentencePiece ones, <family>.spm.json holds the pieces' scores and types: what llama.cpp's converter
reads from tokenizer.model. tests/model/test_gguf_tokenizer.py converts them to GGUF metadata.
chat_templates.json: a template per family in the style of its released one, and transformers'
renderings of a few conversations (apply_chat_template's renderer), errors included.
tokenizers' BPE trainer breaks count ties in no fixed order, so regenerated SentencePiece-style
vocabularies can differ from the committed ones; the tests hold for any of them (each compares a
tokenizer.json with its own GGUF conversion).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "models"
VOCAB = 320
SEQ, GREEDY = 40, 16
MIN_GAP = 0.01  # greedy steps decided by at least this logit margin: far above f32 noise (~1e-5) on any adapter
# A little text to train the tokenizer on and to take the 40-token sequence from.
TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, "
    "it was the season of Darkness, it was the spring of hope, it was the winter of despair. "
    "def add(a, b):\n    return a + b  # 1234567890\n"
)

# family -> (transformers config class name, model class name, config fields: the family's real quirks)
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
FAMILIES = {
    # Llama 3.x: llama3 RoPE scaling, tied embeddings, theta 500000 (Llama-3.2-1B's settings, scaled down)
    "llama3": ("LlamaConfig", "LlamaForCausalLM", dict(
        tie_word_embeddings=True, head_dim=16,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    # Mistral: a sliding window shorter than the sequence, untied lm_head
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(
        tie_word_embeddings=False, sliding_window=12, head_dim=16,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Qwen2/2.5: q/k/v bias, tied embeddings, no sliding window (use_sliding_window false, as released)
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(
        tie_word_embeddings=True, use_sliding_window=False, max_window_layers=3,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Qwen3: per-head q/k RMSNorm, head_dim * heads != hidden_size (as in Qwen3-0.6B), tied embeddings
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(
        tie_word_embeddings=True, head_dim=32, attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Gemma 3: embedding scale, (1 + w) RMSNorm, sandwich norms, GeGLU-tanh, q/k norm, local sliding-window
    # layers with their own RoPE base between global ones (linear-scaled RoPE, as Gemma 3 4B+), an attention
    # scale from query_pre_attn_scalar that differs from head_dim (as Gemma 3 27B), one KV head (as 270M)
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        tie_word_embeddings=True, head_dim=32, num_key_value_heads=1, query_pre_attn_scalar=24, sliding_window=8,
        hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}})),
}


def make_tokenizer():
    """A byte-level BPE of VOCAB tokens trained on TEXT (tokenizers is a piegpu dependency anyway)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([TEXT] * 4, trainer)
    return tok


def randomize(model, seed: int) -> None:
    """Weights big enough that logits are far from uniform (transformers' 0.02 init gives near-ties)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5 * 1.5)


def greedy(model, ids: list) -> tuple:
    """16 greedy tokens by full recomputation (independent of transformers' cache and stop rules), smallest margin."""
    import torch
    seq, gap = list(ids), float("inf")
    with torch.no_grad():
        for _ in range(GREEDY):
            row = model(torch.tensor([seq])).logits[0, -1]
            top = torch.topk(row, 2).values
            gap = min(gap, float(top[0] - top[1]))
            seq.append(int(row.argmax()))
    return seq[len(ids):], gap


def make_family(name: str, seed: int, tok) -> None:
    import torch
    import transformers
    conf_cls, model_cls, fields = FAMILIES[name]
    config = getattr(transformers, conf_cls)(**{**COMMON, **fields})
    ids = tok.encode(TEXT).ids[:SEQ]
    assert len(ids) == SEQ, len(ids)
    for seed in range(seed, seed + 1000, 100):  # the first seed whose greedy tokens are not near-ties
        torch.manual_seed(seed)
        model = getattr(transformers, model_cls)(config).eval().float()
        randomize(model, seed)
        tokens, gap = greedy(model, ids)
        if gap >= MIN_GAP:
            break
    else:
        raise SystemExit(f"{name}: no seed gave greedy margins >= {MIN_GAP}")
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").unlink(missing_ok=True)
    tok.save(str(out / "tokenizer.json"))
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float().numpy()
    np.savez_compressed(out / "expected.npz", ids=np.array(ids, np.int32), logits=logits.astype(np.float32),
                        greedy=np.array(tokens, np.int32))
    meta = {"family": name, "model_class": model_cls, "transformers": transformers.__version__,
            "torch": torch.__version__, "seed": seed, "min_greedy_margin": round(gap, 4)}
    (out / "fixture.json").write_text(json.dumps(meta, indent=2) + "\n")
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"{name}: {model_cls}, {size / 1e3:.0f} kB, greedy {tokens} (smallest margin {gap:.3f})")


LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# family -> (kind, special tokens (control), split regex or SentencePiece flavour)
TOKENIZER_FAMILIES = {
    "llama3": ("bpe", ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], LLAMA3_SPLIT),
    "qwen2": ("bpe", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], QWEN2_SPLIT),
    "mistral": ("spm", ["<unk>", "<s>", "</s>"], "llama"),
    "gemma3": ("spm", ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"], "gemma"),
}


def tokenizer_corpus() -> list:
    texts = OUT / "texts"
    return [(texts / n).read_text(encoding="utf-8") for n in ("mixed.txt", "declaration_of_independence.txt")] + [TEXT]


def make_bpe_family(name: str, specials: list, split: str):
    """A byte-level BPE shaped like Llama 3's / Qwen2's tokenizer.json (special tokens first, as ids 0..)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(ignore_merges=name == "llama3"))
    if name == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(tokenizer_corpus(), trainer)
    if name == "llama3":  # whole words in the vocabulary that no merge sequence reaches, as Llama 3 has:
        from tokenizers import Tokenizer as T  # ignore_merges makes them one token
        doc = json.loads(tok.to_str())
        vocab = doc["model"]["vocab"]
        for word in ("Ġindependence", "Ġfoolishness", "Ġincredulity", "ĠFibonacci", "Ġwisdom", "Ġpanic"):
            if word not in vocab:
                vocab[word] = len(vocab)
        tok = T.from_str(json.dumps(doc))
    if name == "llama3":  # Llama 3 adds <|begin_of_text|>
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                          special_tokens=[("<|begin_of_text|>", 0)])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok, None


def make_spm_family(name: str, specials: list, flavour: str):
    """A SentencePiece-style BPE as transformers' LlamaConverter / GemmaConverter build it from tokenizer.model.

    Pieces are trained with tokenizers (Metaspace words, a limited alphabet so rare characters take the
    byte fallback); the vocabulary is laid out as a SentencePiece model's (control tokens, the 256 byte
    pieces, then pieces by descending score) and the merges come from the scores by transformers'
    generate_merges, as for a released checkpoint.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers.tokenization_utils_base import generate_merges
    prefix = flavour == "llama"
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.normalizer = normalizers.Sequence(([normalizers.Prepend("▁")] if prefix else [])
                                                  + [normalizers.Replace(" ", "▁")])
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=900, show_progress=False, limit_alphabet=120)
    trainer_tok.train_from_iterator(tokenizer_corpus(), trainer)
    learned = sorted(trainer_tok.get_vocab().items(), key=lambda kv: kv[1])
    unk = "<unk>"
    pieces = [(t, 0.0, 2 if t == unk else 3) for t in specials]  # (piece, score, llama.cpp token type): 3 control
    pieces += [(f"<0x{b:02X}>", 0.0, 6) for b in range(256)]  # byte pieces
    pieces += [(t, -float(i), 1) for i, (t, _) in enumerate(learned) if not t.startswith("<0x")]
    vocab = {t: i for i, (t, _, _) in enumerate(pieces)}
    merges = generate_merges(vocab, {t: sc for t, sc, _ in pieces})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True, byte_fallback=True))
    tok.normalizer = trainer_tok.normalizer
    tok.pre_tokenizer = None
    dec = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    tok.decoder = decoders.Sequence(dec + ([decoders.Strip(" ", 1, 0)] if prefix else []))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    bos = "<s>" if prefix else "<bos>"
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                       special_tokens=[(bos, vocab[bos])])
    return tok, {"pieces": [[t, sc, ty] for t, sc, ty in pieces], "add_space_prefix": prefix,
                 "bos": vocab[bos], "eos": vocab["</s>" if prefix else "<eos>"], "unk": vocab[unk]}


# chat templates in the style of each family's released template (same jinja features: bos_token,
# raise_exception, tojson with indent, namespace, loop controls, trim, whitespace control)
CHAT_TEMPLATES = {
    "llama3": (
        "{{- bos_token }}\n"
        "{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}{%- endif %}\n"
        "{%- if messages[0]['role'] == 'system' %}\n"
        "    {%- set system_message = messages[0]['content']|trim %}\n"
        "    {%- set messages = messages[1:] %}\n"
        "{%- else %}\n"
        "    {%- set system_message = \"\" %}\n"
        "{%- endif %}\n"
        "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
        "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
        "{%- if tools is not none %}\n"
        "    {{- \"You may call these functions:\\n\" + (tools | tojson(indent=4)) + \"\\n\\n\" }}\n"
        "{%- endif %}\n"
        "{{- system_message }}\n"
        "{{- \"<|eot_id|>\" }}\n"
        "{%- for message in messages %}\n"
        "    {%- if not (message.role in ['user', 'assistant']) %}\n"
        "        {{- raise_exception('Only user and assistant roles are supported after the system message') }}\n"
        "    {%- endif %}\n"
        "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
        " + '<|eot_id|>' }}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}\n"
        "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
        "{%- endif %}\n"),
    "qwen2": (
        "{%- if tools %}\n"
        "    {{- '<|im_start|>system\\n' }}\n"
        "    {%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
        "{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}{%- endif %}\n"
        "    {{- \"\\n\\n# Tools\\n\\n<tools>\" }}\n"
        "    {%- for tool in tools %}{{- \"\\n\" }}{{- tool | tojson }}{%- endfor %}\n"
        "    {{- \"\\n</tools><|im_end|>\\n\" }}\n"
        "{%- else %}\n"
        "    {%- if messages[0]['role'] == 'system' %}\n"
        "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
        "    {%- else %}\n"
        "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
        "<|im_end|>\\n' }}\n"
        "    {%- endif %}\n"
        "{%- endif %}\n"
        "{%- set ns = namespace(turns=0) %}\n"
        "{%- for message in messages %}\n"
        "    {%- if message.role == 'system' and loop.first %}{%- continue %}{%- endif %}\n"
        "    {%- set ns.turns = ns.turns + 1 %}\n"
        "    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}\n"
        "    {{- '<|im_start|>assistant\\n' }}\n"
        "{%- endif %}\n"),
    "mistral": (
        "{{ bos_token }}{% for message in messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}"
        "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"),
    "gemma3": (
        "{{ bos_token }}\n"
        "{%- if messages[0]['role'] == 'system' -%}\n"
        "    {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
        "    {%- set loop_messages = messages[1:] -%}\n"
        "{%- else -%}\n"
        "    {%- set first_user_prefix = \"\" -%}\n"
        "    {%- set loop_messages = messages -%}\n"
        "{%- endif -%}\n"
        "{%- for message in loop_messages -%}\n"
        "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
        "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
        "    {%- endif -%}\n"
        "    {%- if (message['role'] == 'assistant') -%}{%- set role = \"model\" -%}"
        "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}\n"
        "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
        "    {{ message['content'] | trim }}\n"
        "    {{ '<end_of_turn>\\n' }}\n"
        "{%- endfor -%}\n"
        "{%- if add_generation_prompt -%}\n"
        "    {{'<start_of_turn>model\\n'}}\n"
        "{%- endif -%}\n"),
}
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "  Answer briefly.  "}, {"role": "user", "content": "2 + 2 = ?\n"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": " Hello! 😀 "},
     {"role": "user", "content": "自然语言处理?"}],
    [{"role": "assistant", "content": "I speak first"}],  # roles out of order: some templates refuse
]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather <now> & here",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def make_chat_fixtures(specials: dict) -> dict:
    """Each family's template and transformers' renderings of CHATS (errors: the exception's message)."""
    from transformers.utils.chat_template_utils import render_jinja_template
    out = {}
    for name, template in CHAT_TEMPLATES.items():
        cases = []
        for chat in CHATS:
            for gen in (True, False):
                for tools in ([None, TOOLS] if name in ("llama3", "qwen2") else [None]):
                    case = {"messages": chat, "add_generation_prompt": gen, "tools": tools}
                    try:
                        text = render_jinja_template([chat], tools=tools, chat_template=template,
                                                     add_generation_prompt=gen, **specials[name])
                        case["expected"] = text[0][0] if isinstance(text, tuple) else text[0]
                    except Exception as e:
                        case["error"] = str(e)
                    cases.append(case)
        out[name] = {"template": template, "special_tokens": specials[name], "cases": cases}
    return out


def make_family_tokenizers() -> None:
    """Write tests/fixtures/models/tokenizers/<family>.json (+ <family>.spm.json)."""
    out = OUT / "tokenizers"
    out.mkdir(exist_ok=True)
    for name, (kind, specials, how) in TOKENIZER_FAMILIES.items():
        tok, spm = (make_bpe_family if kind == "bpe" else make_spm_family)(name, specials, how)
        tok.save(str(out / f"{name}.json"))
        if spm is not None:
            (out / f"{name}.spm.json").write_text(json.dumps(spm, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{name}: {kind} tokenizer of {tok.get_vocab_size()} tokens")
    specials = {"llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
                "qwen2": {"bos_token": None, "eos_token": "<|im_end|>"},
                "mistral": {"bos_token": "<s>", "eos_token": "</s>"},
                "gemma3": {"bos_token": "<bos>", "eos_token": "<eos>"}}
    chats = make_chat_fixtures(specials)
    (out / "chat_templates.json").write_text(json.dumps(chats, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"chat templates: {sum(len(c['cases']) for c in chats.values())} renderings by transformers")


def main() -> None:
    """Write every family's fixture directory (or, with --tokenizers, the family tokenizers)."""
    if sys.argv[1:] == ["--tokenizers"]:
        make_family_tokenizers()
        return
    tok = make_tokenizer()
    names = sys.argv[1:] or list(FAMILIES)
    for seed, name in enumerate(FAMILIES):
        if name in names:
            make_family(name, seed, tok)


if __name__ == "__main__":
    main()
