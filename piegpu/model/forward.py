"""The transformer forward pass, step by step (read it like llama2.c's forward()).

One pass of T tokens: embed (token ids read from a channel on the device); per layer:
attention norm -> QKV -> RoPE + KV write -> attention -> output projection + residual
-> FFN norm -> gate/up -> SwiGLU -> down projection + residual; final norm; logits of
the readout rows. Each RMSNorm is folded into the matvec that reads it (5 dispatches per
layer): the decode matvec normalizes x as it reads it, the subgroup matmul of several
tokens scales its dot products by each token's 1 / rms (Kernels.folds_norm); on adapters
without that matmul, passes of several tokens normalize in a dispatch of their own. An
epilogue that reads the readout rows' final hidden state (intrinsics.output(i, "hidden"))
finds them normalized in the scratch's `hn`: a norm dispatch of their own where the logits
fold the norm in, recorded only for such epilogues (final_logits).

Family steps (model/family.py) are chosen here from the config, not by a forward per
family: a QKV bias or per-head q/k norm runs between the QKV projection and RoPE (the
QKV matvec then stores its rows instead of rotating them in its epilogue), and
sliding-window layers pass their window to attention and their own RoPE table (Gemma 3), a
block's output goes through its sandwich norm before the residual add (Gemma 3), the MLP's
activation is the family's (SwiGLU or GeGLU). The RoPE tables already hold the config's
scaled frequencies (llama3, linear); Gemma's embedding scale and (1 + w) norm weights are
folded into the embed shader and the uploaded weights.
"""

from __future__ import annotations

from .kernels import Kernels
from .lora_steps import Lora


def add_block_output(k: Kernels, m, x, out_norm, s, key: tuple, lora: Lora, layer: int, group: str) -> None:
    """h += m x, or h += rmsnorm(m x) * out_norm with a sandwich norm (s.hn holds m x meanwhile); a LoRA
    delta of projection `group` added to m x where the plan adapts it."""
    adapted = lora.has(group)
    if out_norm is None:
        k.matvec_residual(m, x, residual=s.h, key=key)
        if adapted:
            lora.add(layer, group, x, s.h)
    else:
        k.matvec_normed_residual(m, x, out_norm, residual=s.h, tmp=s.hn, key=key,
                                 then=(lambda: lora.add(layer, group, x, s.hn)) if adapted else None)


def gate_up(k: Kernels, layer, s, i: int, lora: Lora) -> None:
    """s.act = act(gate x) * (up x), x = rmsnorm(h): fused in the matvec, or with LoRA stored, adapted, activated."""
    if not lora.has("gate_up"):
        x, norm = normed(k, s, layer.post_norm, (i, "n2"))
        k.gate_up_swiglu(layer.gate_up, x, norm, out=s.act, key=(i, "gu"))
        return
    x, _ = normed(k, s, layer.post_norm, (i, "n2"), own=True)
    lora.store(layer.gate_up, x, out=lora.bufs["gu"], key=(i, "gu"))
    lora.glu(i, x, lora.bufs["gu"], s.act)


def qkv_stored(k: Kernels, w, layer, s, i: int, x, norm, lora: Lora) -> None:
    """[q | k | v] of every token stored in s.qkv, with its LoRA delta, its bias / q-k norm (qk_prep) after."""
    k.qkv(layer.qkv, x, out=s.qkv, key=(i, "qkv"), norm=norm)
    if lora.has("qkv"):
        lora.add(i, "qkv", x, s.qkv)
    if w.qk_prep:
        k.qk_prep(s.qkv, layer, key=(i, "qk_prep"))


def normed(k: Kernels, s, norm, key: tuple, own: bool = False) -> tuple:
    """(x, norm) for a matvec of rmsnorm(h): h and the norm where the pass's matvecs fold it in (not with `own`:
    a LoRA's A reads x too), else the normalized rows (a norm dispatch of their own, into s.hn) and None."""
    if (k.decode or k.folds_norm) and not own:
        return s.h, norm
    k.rmsnorm(s.h, norm, out=s.hn, tokens=k.T, first=0, key=key)
    return s.hn, None


def final_logits(k: Kernels, w, s, first: int, rows: int, hidden: bool = False) -> None:
    """s.logits = lm_head(rmsnorm(h[first:first + rows])): the norm folded into the logits matvec for one row
    from anywhere (the decode matvec) or, where the matmul folds it, for rows from row 0.

    `hidden`: the normalized rows must also land in s.hn[0:rows] (an epilogue reads them). Where the
    norm is folded that is a norm dispatch of its own, recorded only then; the logits stay the folded ones.
    """
    if rows == 1 or (k.folds_norm and first == 0):
        if hidden:
            k.rmsnorm(s.h, w.final_norm, out=s.hn, tokens=rows, first=first, key=("nf", first, rows))
        k.logits(w.lm_head, s.h, w.final_norm, out=s.logits, rows=rows, key=("lm", first, rows), first=first)
    else:
        k.rmsnorm(s.h, w.final_norm, out=s.hn, tokens=rows, first=first, key=("nf", first, rows))
        k.logits(w.lm_head, s.hn, None, out=s.logits, rows=rows, key=("lm", first, rows))


def forward(k: Kernels, w, ws, s, tokens, first: int, rows: int, hidden: bool = False) -> None:
    """Record one forward pass: weights `w` (a GpuModel), working set `ws`, scratch buffers `s`.

    Bind groups over the working set's buffers are cached with the working set (ws.binds);
    the others (weights and scratch only) with the recorder's store, the scratch's.

    `tokens` is the channel buffer holding the pass's token ids; the logits of token
    rows [first, first + rows) land in s.logits (and, with `hidden`, their final-normed rows in s.hn).
    """
    lora = Lora(k, w, s, [(ws, 0, k.T)])
    k.embed(w.embed, tokens, out=s.h, binds=ws.binds)
    for i, layer in enumerate(w.layers):
        rope = w.rope_table(ws.max_tokens, i)
        # attention block: h += o_proj(attention(rope(qkv(rmsnorm(h)))))
        x, norm = normed(k, s, layer.input_norm, (i, "n1"), own=lora.has("qkv"))
        if w.qk_prep or lora.has("qkv"):  # a step before RoPE: project, prepare, then rotate and write the KV cache
            qkv_stored(k, w, layer, s, i, x, norm, lora)
            k.rope_kv_seqs(s.qkv, s.q, rope, [(ws, 0, k.T)], i)
        else:
            k.qkv_rope_kv(layer.qkv, x, norm, q=s.q, ws=ws, layer=i, rope=rope, key=(i, "qkv"), binds=ws.binds)
        k.attention(s.q, ws, i, out=s.o, key=(i, "attention"), binds=ws.binds, window=k.config.window(i),
                    parts=s.parts)
        add_block_output(k, layer.o, s.o, layer.attn_out_norm, s, (i, "o"), lora, i, "o")
        # feed-forward block: h += down(act(gate(x)) * up(x)), x = rmsnorm(h)
        gate_up(k, layer, s, i, lora)
        add_block_output(k, layer.down, s.act, layer.ffn_out_norm, s, (i, "down"), lora, i, "down")
    final_logits(k, w, s, first, rows, hidden)  # final norm + logits of the readout rows


def forward_batch(k: Kernels, w, seqs: list, s, tokens, readout: list, hidden: bool = False) -> None:
    """Record one pass over several sequences: `seqs` = [(working set, first token, tokens), ...] in pass order.

    Token-parallel steps (embedding, norms, every matvec) run once over all T tokens of
    the pass, so each weight block is read once per token tile whatever the sequence; the
    steps that touch a sequence's KV state (RoPE + KV write, attention) bind several
    sequences per dispatch, each through its own page table and length. `readout` = [(first token row,
    rows)] per sequence: their logits land in s.logits, sequence by sequence (with `hidden`, their final-normed
    rows in s.hn the same way: apart, the norm gathers them there anyway).
    """
    positions = max(ws.max_tokens for ws, _, _ in seqs)
    lora = Lora(k, w, s, seqs)
    k.embed(w.embed, tokens, out=s.h, binds={})  # the plan keeps it (the plan lives with its ForwardPass)
    for i, layer in enumerate(w.layers):
        # attention block: h += o_proj(attention(rope(qkv(rmsnorm(h))))), attention per sequence
        rope = w.rope_table(positions, i)
        x, norm = normed(k, s, layer.input_norm, (i, "n1"), own=lora.has("qkv"))
        if not w.qk_prep and not lora.has("qkv") and k.fuses_rope_kv(seqs):  # q, k, v rotated and written by the
            k.qkv_rope_kv(layer.qkv, x, norm, q=s.q, ws=None, layer=i, rope=rope, key=(i, "qkv"), seqs=seqs,
                          binds={})  # QKV matmul (its bind groups name this plan's sequences: made for the plan)
            k.attention_seqs(s.q, s.o, seqs, i)
        else:
            qkv_stored(k, w, layer, s, i, x, norm, lora)
            k.rope_attention_seqs(s.qkv, s.q, rope, s.o, seqs, i)  # every sequence's pages in one dispatch
        add_block_output(k, layer.o, s.o, layer.attn_out_norm, s, (i, "o"), lora, i, "o")
        # feed-forward block: h += down(act(gate(x)) * up(x)), x = rmsnorm(h)
        gate_up(k, layer, s, i, lora)
        add_block_output(k, layer.down, s.act, layer.ffn_out_norm, s, (i, "down"), lora, i, "down")
    # final norm of each sequence's readout rows, gathered in order (adjacent ones in one dispatch: a
    # decode pass's are all adjacent); logits of all of them
    runs: list = []  # [first token row, rows]
    for first, rows in readout:
        if runs and sum(runs[-1]) == first:
            runs[-1][1] += rows
        else:
            runs.append([first, rows])
    if len(runs) == 1:  # a decode batch's rows (all of h), or one sequence's
        final_logits(k, w, s, *runs[0], hidden)
        return
    row = 0
    for first, rows in runs:
        k.rmsnorm(s.h, w.final_norm, out=s.hn, tokens=rows, first=first, key=("nf", first, rows, row), out_first=row)
        row += rows
    k.logits(w.lm_head, s.hn, None, out=s.logits, rows=row, key=("lm", 0, row))
