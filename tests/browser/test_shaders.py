"""Every hand-written shader of shaders/, with the specialisations the default model composes, compiles
in Chromium's WebGPU (Tint) and gets a compute pipeline under the bind group layout the runtime uses."""

from __future__ import annotations

import pytest

from piegpu.kernel import channel_layout
from piegpu.model.shader_code import decode_lane_code, lane_heads
from piegpu.runtime.device import get_device
from piegpu.model.shaders import binding_kinds, compose, includes, shader_root, standard_wgsl
from tests.browser.model_capture import with_every_snippet



PARTS = "@group(0) @binding(6) var<storage, read_write> parts: array<vec4<f32>>;"
# Snippets that need wgpu's native shader-int64 (Tint has no 64-bit integers): Chromium compiles their kernels with
# the 32-bit-word snippet that defines the same functions; the 64-bit ones run in every lavapipe test instead.
NATIVE_ONLY = {"blocks/kv_read_storage_f16_u64": "blocks/kv_read_storage_f16",
               "blocks/kv_rw_storage_f16_u64": "blocks/kv_rw_storage_f16"}
SINK = "@group(0) @binding(7) var<storage, read_write> sink: atomic<u32>;"  # the decode attention's touched V words


def extra(config) -> list:
    """Specialisations the default model's generation paths do not reach, at its dimensions.

    advance_accept runs after a pass whose epilogue decides how many tokens stay (speculative
    decoding, examples/speculative.py); attention_tokens and attention are the prefill and decode
    attention of adapters without 8-lane subgroups (lavapipe has them and runs attention_lanes and
    attention_decode_lanes), rope_kv_seqs their batched passes' RoPE (rope_attention_lanes) and
    rmsnorm their norm of few rows (rmsnorm_lanes, itself reached only by mixed readouts and sandwich norms
    now that the subgroup matmul folds the norm in); qk_prep is the q/k/v bias (Qwen2) and per-head q/k
    RMSNorm (Qwen3) of other model families; the lora_* kernels run where a LoRA adapter is applied.
    """
    qr, kr = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
    out = [("advance_accept", {"N": n, **channel_layout.shader_params()}, {}) for n in (1, 5)]
    # KV in f32 (storage buffers and textures) and (kv_dtype "f16") in buffers of halves, read 8 a load by the
    # decode attention's octet form
    kv_read = [({"KV": "blocks/kv_read_storage"}, {}), ({"KV": "blocks/kv_read_texture"}, {"KV_W": 6144}),
               ({"KV": "blocks/kv_read_storage_f16"}, {})]
    kv_write = [({"KV_WRITE": "blocks/kv_write_storage"}, {}), ({"KV_WRITE": "blocks/kv_write_texture"}, {"KV_W": 6144}),
                ({"KV_WRITE": "blocks/kv_write_storage_f16"}, {})]
    common = {"HD": config.head_dim, "QR": qr, "KR": kr, "SCALE": config.attention_scale, "WINDOW": 0,
              "GROUP": config.num_attention_heads // config.num_key_value_heads, "PAGE": 16}
    hd4, hg = config.head_dim // 4, lane_heads(config.num_attention_heads // config.num_key_value_heads)
    # a long sequence's split decode attention (flash-decoding), which the captured short runs do not reach,
    # and its merge
    for kv, kvp in kv_read:
        octets = kv["KV"].endswith("_f16")
        touch = 0 if "texture" in kv["KV"] else 8 if octets else 4  # vec4s a cache line (kv_pages touch_step)
        out += [("attention_decode_lanes", {**common, **kvp, "KC": 3, "VC": 4, "HG": hg, "SEQS": 1, "SPLITS": S,
                                            "PARTS": PARTS if S > 1 else "", "SINK": SINK if touch else "",
                                            "ATTEND": decode_lane_code(hd4, hg, split=S > 1, octets=octets,
                                                                       touch=touch)}, kv)
                for S in ((1, 3) if octets else (3,))]
    # the fused RoPE + KV write + attention of batched decode passes with KV in buffers, f32 and halves
    # (lavapipe's pages are textures: rope_kv_seqs, then attention_decode_lanes)
    rw = [("blocks/kv_rw_storage", 4, {}), ("blocks/kv_rw_storage_f16", 8, {"octets": True}),
          ("blocks/kv_rw_storage_f16", 8, {"octets": True, "hex_k": True})]  # (K read 8 or 16 halves a load)
    out += [("rope_attention_lanes", {**common, "HG": hg, "SEQS": G, "KC": 4, "VC": 5, "SINK": SINK,
                                      "ATTEND": decode_lane_code(hd4, hg, True, touch=touch, **reads)}, {"KV_RW": sn})
            for G in (1, 3) for sn, touch, reads in rw]
    out.append(("attention_combine", {"HD": config.head_dim, "HEADS": config.num_attention_heads, "SPLITS": 3,
                                      "SEQS": 1}, {}))
    if get_device().subgroup_lanes:  # the attention of CPU adapters without them (else captured)
        for kv, kvp in kv_read:
            out.append(("attention_tokens", {**common, **kvp, "KC": 1, "VC": 2, "HEADS": config.num_attention_heads},
                        {"ATTEND": "attend", **kv}))
            out += [("attention", {**common, **kvp, "KC": 3, "VC": 4, "WG": 8, "SEQS": G, "SPLITS": S},
                     {"ATTEND_FN": "attend", **kv}) for G, S in ((1, 1), (2, 1), (1, 3))]
        # the norms: the plain one of those adapters, and lavapipe's own, which the default model's passes no
        # longer reach (its matmuls fold the norm in) but mixed readouts and sandwich norms do
        out += [(name, {"H4": config.hidden_size // 4, "EPS": float(config.rms_norm_eps), "ADD": add}, {})
                for name, add in (("rmsnorm", False), ("rmsnorm_lanes", False), ("rmsnorm_lanes", True))]
        # and RoPE + KV write of batched passes whose sequences are not all one token each
        for kv, kvp in kv_write:
            out += [("rope_kv_seqs", {"QR": qr, "KR": kr, "HD": config.head_dim, "SEQS": G, "PAGE": 16, "KC": 4,
                                      "VC": 5, **kvp}, kv) for G in (1, 2)]
    # the LoRA steps (model/lora_steps.py) of a pass with an adapted row, at rank 16: every fused projection's
    # shrink and expand (q | k | v in three parts, o and down in one) and gate/up's activation, one and 3 sequences
    h, i = config.hidden_size, config.intermediate_size
    for G in (1, 3):
        out += [("lora_shrink", {"IN4": inp // 4, "RT": rt, "SEQS": G}, {}) for inp, rt in ((h, 48), (qr, 16), (i, 16))]
        out += [("lora_expand", {"OUT": o, "OUT_STRIDE": o, "R": 16, "RT": rt, "B1": b1, "B2": b2, "SEQS": G}, {})
                for o, rt, b1, b2 in ((qr + 2 * kr, 48, qr, qr + kr), (h, 16, h, h))]
        out += [("lora_glu", {"I": i, "R": 16, "ACT": act, "SEQS": G}, {}) for act in (0, 1)]
    if "qk_prep" in all_shader_files():
        out += [("qk_prep", {"QR": qr, "KR": kr, "HD": config.head_dim, "BIAS": bias, "QK_NORM": norm,
                             "EPS": float(config.rms_norm_eps)}, {})
                for bias, norm in ((True, False), (False, True), (True, True))]
    return out


def all_shader_files() -> set:
    """Every .wgsl under shaders/, as the names compose() takes ("attention", "formats/q4_1")."""
    out = set()
    root = shader_root()
    for entry in root.iterdir():
        if entry.is_dir():
            out |= {f"{entry.name}/{f.name[:-5]}" for f in entry.iterdir() if f.name.endswith(".wgsl")}
        elif entry.name.endswith(".wgsl"):
            out.add(entry.name[:-5])
    return out


def encoder_specs(model_capture) -> list:
    """The encoder's kernels (model/encoder_kernels.py) at BERT-base's dimensions: LayerNorm (plain and with the
    embeddings), attention, pooling, and the captured matmuls with the bias epilogue (every activation)."""
    from piegpu.model.encoder_kernels import ACTS
    out = [("layernorm", {"H4": 192, "EPS": 1e-12}, {"ROW_VALUE": row}) for row in ("blocks/ln_plain", "blocks/ln_embed")]
    out += [("encoder_attention", {"HEADS": 12, "HD4": 16, "H4": 192, "SCALE": 0.125, "WG": wg}, {}) for wg in (16, 64)]
    out += [("encoder_pool", {"H4": 192, "MODE": mode}, {}) for mode in range(6)]
    matmul = next((p, sn) for n, p, sn in model_capture.specs if n == "matmul" and sn.get("EPILOGUE") == "epilogues/store")
    out += [("matmul", {**matmul[0], "ADD": add, "ACT": act}, {**matmul[1], "EPILOGUE": "epilogues/bias"})
            for act in ACTS.values() for add in (False, True)]
    return out


def label(name: str, params: dict, snippets: dict) -> str:
    shown = ",".join(f"{k}={v}" for k, v in sorted(params.items()) if len(str(v)) <= 24)
    return f"{name}[{','.join(sorted(snippets.values()))}]({shown})"


@pytest.fixture(scope="module")
def specialisations(model_capture) -> list:
    """[(label, name, params, snippets, source)] of every shader specialisation to compile."""
    out = []
    for name, params, snippets in with_every_snippet(model_capture.specs) + extra(model_capture.config) + \
            encoder_specs(model_capture):
        snippets = {slot: NATIVE_ONLY.get(sn, sn) for slot, sn in snippets.items()}
        src = standard_wgsl(compose(name, params, snippets))  # Tint wants `enable subgroups;`, naga refuses it
        out.append((label(name, params, snippets), name, params, snippets, src))
    return out


@pytest.fixture(scope="module")
def compiled(browser, specialisations) -> dict:
    """{label: harness reply} for every specialisation, compiled in one batch."""
    items = [{"label": lab, "code": src, "entry_points": ["main"], "bindings": binding_kinds(src)}
             for lab, _, _, _, src in specialisations]
    return {r["label"]: r for r in browser.compile(items)}


def test_every_shader_file_is_covered(specialisations):
    """Each file of shaders/ is a shader or a snippet of at least one compiled specialisation."""
    used = set()
    for _, name, _, snippets, src in specialisations:
        used.add(name)
        used |= set(snippets.values())
        for part in [name, *snippets.values()]:
            used |= includes(part)  # shaders/blocks/: helpers the snippets include
    native = set(NATIVE_ONLY).union(*(includes(n) for n in NATIVE_ONLY))  # and what only they include
    missing = all_shader_files() - used - native
    assert not missing, f"shaders never compiled in Chromium: {sorted(missing)}"


def test_model_specialisations_recorded(model_capture):
    """The capture saw the decode, prefill and batched paths (else coverage would be silently thin)."""
    names = {name for name, _, _ in model_capture.specs}
    d = get_device()
    lanes = d.subgroup_lanes
    # a batched decode pass: the fused rope_attention_lanes with 8-lane subgroups and KV buffers; with KV textures
    # (lavapipe) or without subgroups, rope_kv_seqs and then the attention
    fused = lanes and not d.texture_weights
    prefill, decode, batched = (("attention_lanes", "attention_decode_lanes",
                                 "rope_attention_lanes" if fused else "rope_kv_seqs") if lanes
                                else ("attention_tokens", "attention", "rope_kv_seqs"))
    assert {"embed", "matvec_decode", "matmul", decode, prefill, batched, "advance"} <= names, names
    assert ("rmsnorm" in names) != bool(lanes), names  # the subgroup matmul folds every norm of the default model
    assert any(p.get("SEQS", 1) > 1 for n, p, _ in model_capture.specs if n == (batched if fused else decode))


def test_every_specialisation_compiles_in_chromium(specialisations, compiled):
    failures = []
    for lab, *_, src in specialisations:
        reply = compiled[lab]
        if reply["errors"]:
            failures.append(f"{lab}:\n  " + "\n  ".join(reply["errors"]))
    assert not failures, f"{len(failures)} of {len(specialisations)} shaders rejected by Chromium:\n" + \
        "\n".join(failures)
    assert len(specialisations) >= 30
