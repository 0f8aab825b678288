"""The generated parts of shaders/*.wgsl: unrolled register tiles and attention loops.

WGSL has no way to index bindings or to keep loop-indexed arrays in registers on lavapipe, so
these functions write that code out in Python; model/kernels.py passes it to compose() as
parameters ({{TILE}}, {{LANES}}, {{ATTEND}}, ...). The subgroup forms (lanes > 0) share a
load among the lanes of a subgroup: on lavapipe a storage load is a loop over the lanes and a
uniform load at a computed index a gather, while subgroupBroadcast is cheap.
"""

from __future__ import annotations

from functools import lru_cache

from .gpu_weights import FOUR_ROW_FORMATS


SUM_TOKENS = 8  # tokens whose dot products with a row's vec4 the matmul tile takes together (tile_code)


@lru_cache(maxsize=None)
def tile_code(R: int, TB: int, lanes: int = 0, four: bool = False, norm: bool = False, per_call: int = 2,
              texels: int = 0) -> str:
    """The unrolled body of matmul.wgsl: an R x TB tile of accumulators in named registers.

    Per 32-weight block: every token's 8 x vec4s first (and each token's sum of them), then row by row
    -- fewer values live at once than decoding all R rows before the tokens: on lavapipe, alternated in
    one process, the default model's B=8 pass took 61.3 vs 64.1 ms, a 128-token prefill 661 vs 706 --
    the row's raw vec4s q_j, each dotted with the x vec4s of a run of SUM_TOKENS tokens before the next
    (j outer): q_j stays in registers for the run's dots and each dot reads x once, where a token's whole
    sum over the 8 vec4s at a time reloaded the row for every token (16 vector registers on x86). The
    block's scale and min come out of the dots: its weights are d q + m, so the token's sum is d
    sum_j q_j x_j + m sum_j x_j (two multiplies a token, not eight vec4 ones a row). Pairs alternated in
    one process against the weights' dots token by token: gate/up at 8 tokens 0.89x the time (15.4 vs
    17.1 ms), and against the weights' dots j outer: the B=8 pass 0.95x (51.4 vs 54.2 ms; QKV 0.91x, the
    logits 0.92x, gate/up 0.94x), B=4 0.97x, B=16 0.985x, a 128-token prefill 0.95x (510 vs 538 ms) --
    runs of 16 tokens (20 registers) measured 1.02-1.03x at B=16 and prefill. Tokens past the group's
    end read its last token (clamped) and are not stored.
    lanes > 0 (a subgroup of at least that many lanes, all active): lane l loads only vec4 l % 8 of a
    token's block and subgroupBroadcast hands the 8 vec4s to every lane. On lavapipe a uniform-binding
    load at a computed index is a gather of every lane's address and a broadcast is far cheaper: the
    default model's Q4_1 gate/up at 128 tokens took 0.62x the time of the 8-load form, its Q8_0 logits
    0.72x (benchmarks/kernels.py --prefill).
    four (a texture format, R a multiple of 4, row-aligned tiles): one block_scales4 fetch gives
    four rows' scale words (see matvec_rows).
    norm (with lanes): x is the raw residual stream and the layer's RMSNorm is folded in, as in the
    decode matvec: the tile multiplies x * norm_w, each lane sums the squares of the x vec4s it
    loads, and after the blocks each token's dot products are scaled by 1 / rms (a subgroupAdd of
    those sums) -- the norm's own dispatch and its pass over x are gone (two dispatches a layer).
    per_call: rows the epilogue takes a call (2: epilogue, 4: epilogue4; see epilogue_calls).
    texels (a texture format whose block's quants are that many texels): each row's texels are fetched once
    and block_q_t decodes the 8 vec4s from them, where block_q(wb, j) fetched one for each vec4 -- lavapipe's
    compiler did not merge the repeated fetches of Q8_0's two texels: the default model's logits at 8 tokens
    took 0.91x the time (10.05 vs 11.09 ms, pairs 0.90-0.92, benchmarks-style replay alternated in one process).
    """
    if norm and not lanes:
        raise ValueError("the RMSNorm fold of the matmul needs the subgroup form")
    out = []
    add = out.append
    for rr in range(R):
        for tt in range(TB):
            add(f"var a{rr}_{tt} = 0.0;")
    if norm:
        for tt in range(TB):
            add(f"var ss{tt} = 0.0;")
    for tt in range(TB):
        add(f"let xo{tt} = min(t0 + {tt}u, T - 1u) * NB * 8u;")
    add("for (var b = 0u; b < NB; b++) {")
    if norm:
        add("  let nwl = norm_w[b * 8u + (lane & 7u)];")
    for tt in range(TB):  # every token's 8 x vec4s of the block first ...
        if norm:
            add(f"  let xr{tt} = x[xo{tt} + b * 8u + (lane & 7u)];")
            add(f"  ss{tt} += dot(xr{tt}, xr{tt});")
            add(f"  let xl{tt} = xr{tt} * nwl;")
        elif lanes:
            add(f"  let xl{tt} = x[xo{tt} + b * 8u + (lane & 7u)];")
        for j in range(8):
            add(f"  let x{tt}_{j} = " + (f"subgroupBroadcast(xl{tt}, {j}u);" if lanes else f"x[xo{tt} + b * 8u + {j}u];"))
    for tt in range(TB):  # each token's sum of the block's x (for the blocks' m term)
        add(f"  let xv{tt} = " + " + ".join(f"x{tt}_{j}" for j in range(8)) + ";")
        add(f"  let xs{tt} = xv{tt}.x + xv{tt}.y + xv{tt}.z + xv{tt}.w;")
    for rr in range(R):  # ... then row by row
        add(f"  let wb{rr} = (r0 + {rr}u) * (NB * WB) + b * WB;")
        if four:  # one scale fetch for rows rr .. rr + 3
            if rr % 4 == 0:
                add(f"  let sw{rr} = block_scales4(r0 + {rr}u, b);")
            add(f"  let dm{rr} = dm_of4(sw{rr - rr % 4}, r0 + {rr - rr % 4}u, b, {rr % 4}u);")
        else:
            add(f"  let dm{rr} = block_dm(wb{rr});")
        for k in range(texels):
            add(f"  let qt{rr}_{k} = q_texel(wb{rr} + {k}u);")
        for first in range(0, TB, SUM_TOKENS):  # the tokens in runs of SUM_TOKENS, each run ...
            run = range(first, min(TB, first + SUM_TOKENS))
            for j in range(8):  # ... against raw vec4 j of the row, which stays in registers for the run's dots
                raw = f"block_q_t(qt{rr}_{j * texels // 8}, {j}u)" if texels else f"block_q(wb{rr}, {j}u)"
                add(f"  let q{rr}_{j}_{first} = {raw};")
                for tt in run:  # the block's raw sums (var at j = 0)
                    add(f"  {f'var p{rr}_{tt} =' if j == 0 else f'p{rr}_{tt} +='} dot(q{rr}_{j}_{first}, x{tt}_{j});")
            for tt in run:  # weights d q + m: sum_j w_j x_j = d sum_j q_j x_j + m sum_j x_j
                add(f"  a{rr}_{tt} += dm{rr}.x * p{rr}_{tt} + dm{rr}.y * xs{tt};")
    add("}")
    for tt in range(TB):
        if norm:
            add(f"let sc{tt} = inverseSqrt(subgroupAdd(ss{tt}) / f32(NB * 32u) + EPS);")
        acc = [f"a{rr}_{tt}" + (f" * sc{tt}" if norm else "") for rr in range(R)]
        add(f"if (live && t0 + {tt}u < T) {{")
        out.extend("  " + call for call in epilogue_calls(R, f"TOK0 + t0 + {tt}u", acc, per_call))
        add("}")
    return "\n".join("    " + line for line in out)


EPILOGUE_NAMES = {2: "epilogue", 4: "epilogue4"}  # rows a call -> the epilogue's function


def epilogue_calls(R: int, token: str, acc: list, per_call: int = 2) -> list:
    """The epilogue calls of R rows of a token, `per_call` rows a call: a pair (epilogue(t, r, a, b)) or four
    (epilogue4(t, r, a, b, c, d)), R a multiple and the invocation's rows starting on one -- no array<f32, R>
    (see matvec_rows). Four let epilogues/rope_kv.wgsl write a whole KV texel."""
    step, name = per_call, EPILOGUE_NAMES[per_call]
    if R % step:
        raise ValueError(f"{name} takes {step} rows a call: R={R} is no multiple")
    return [f"{name}({token}, ROW0 + r0 + {rr}u, {', '.join(acc[rr:rr + step])});" for rr in range(0, R, step)]


@lru_cache(maxsize=None)
def lane_code(HD4: int) -> str:
    """The unrolled body of attention_lanes.wgsl for heads of HD4 vec4s: q and the accumulators in
    named registers, the positions walked page by page (one page-table read a page), each position's
    K and V rows loaded 8 vec4s a load (lane l: vec4 l of each 8) and broadcast, the online softmax of
    attend.wgsl per lane, then the store."""
    loads = (HD4 + 7) // 8
    out = []
    add = out.append
    for i in range(HD4):
        add(f"let q{i} = q[tok * QR4 + head * HD4 + {i}u] * SCALE;")
        add(f"var a{i} = vec4<f32>(0.0);")
    add("for (var p0 = all.x - all.x % PAGE; p0 < all.y; p0 += PAGE) {")
    add("  let off = tables[4u + p0 / PAGE] * PAGE - p0;  // + p: the pool row of position p (u32 wraps)")
    add("  for (var p = max(p0, all.x); p < min(p0 + PAGE, all.y); p++) {")
    add("  let base = (off + p) * KR4 + kvb;")
    add("  let live = p >= mine.x && p < mine.y;")
    for c in range(loads):
        add(f"  let kl{c} = k_at(base + min({8 * c}u + lane, HD4 - 1u));")
        add(f"  let vl{c} = v_at(base + min({8 * c}u + lane, HD4 - 1u));")
    add("  let s4 = " + " + ".join(f"q{i} * subgroupBroadcast(kl{i // 8}, {i % 8}u)" for i in range(HD4)) + ";")
    add("  let s = s4.x + s4.y + s4.z + s4.w;")
    add("  let m2 = select(m, max(m, s), live);")
    add("  let c = exp(m - m2);")
    add("  let e = select(0.0, exp(s - m2), live);")
    add("  l = l * c + e;")
    for i in range(HD4):
        add(f"  a{i} = a{i} * c + e * subgroupBroadcast(vl{i // 8}, {i % 8}u);")
    add("  m = m2;")
    add("  }")
    add("}")
    add("if (t0 + lane <= last) {")
    for i in range(HD4):
        add(f"  o[tok * QR4 + head * HD4 + {i}u] = a{i} / l;")
    add("}")
    return "\n".join("  " + line for line in out)


@lru_cache(maxsize=None)
def decode_lane_code(HD4: int, HG: int, rope: bool = False, split: bool = False, octets: bool = False,
                     touch: int = 0, hex_k: bool = False) -> str:
    """attend() of attention_decode_lanes.wgsl (rope: of rope_attention_lanes.wgsl).

    HG query heads of one KV head, lane l holding vec4s l, l + 8, ... of each head's output (zero
    past the head). The positions go in blocks of 8, one a lane: the lane scores its position
    against every head from its whole K row (found through the page table of the sequence whose
    row starts at word tb, blocks/pages.wgsl), then one max over the lanes (lanes_max) and one exp per
    head and block update the online softmax of attend.wgsl (each lane sums its own positions' weights,
    one subgroupAdd after the last block: 0.94x the attention time at context 2000), and the block's 8 V rows are
    added with their weights broadcast. With rope, q and the token's k come rotated from the QKV
    rows, k and v go to the token's page (from the KV head's first workgroup) and the token's own
    position is taken from registers. With split (flash-decoding, not with rope), the workgroup takes
    split `split` of SPLITS contiguous runs of the positions and stores its partial softmax -- each
    head's (max, sum) and unnormalized output -- in `parts` for attention_combine.wgsl. With octets (KV
    buffers of halves, blocks/kv_read_storage_f16.wgsl: two vec4s a 16-byte element) a K row is read an element
    at a time and lane l holds vec4s 2l, 2l + 1, 2l + 16, ... (elements l, l + 8, ...): half the loads;
    with hex_k too (blocks/kv_read_storage_f16_u64.wgsl) a K row is read sixteen halves a load (k_hex).
    With touch > 0 (V in storage buffers, `touch` vec4s a 64-byte cache line) each lane also touches its
    position's V row, a word a line (v_touch), before the block's K loads: on lavapipe a storage load is a loop
    over the lanes, so the V loads -- 8 lanes in one row -- missed the CPU caches one row at a time (8 memory
    waits a block, 45% of the split attention's perf samples at context 2000); touched 8 rows a load, they wait
    once. The lanes xor the touched words into the atomic `sink` at the end, so the compiler keeps the loads.
    """
    if rope and split:
        raise ValueError("the rope form of the decode attention does not split")
    if octets and HD4 % 2 or hex_k and (not octets or HD4 % 4):
        raise ValueError(f"KV octets need heads of an even number of vec4s and k_hex octets and a multiple of 4, "
                         f"not {HD4}")
    parts = range((HD4 + 7) // 8)
    idx = {c: f"min({8 * c}u + lane, HD4 - 1u)" for c in parts}
    mine = {c: f"{8 * c}u + lane < HD4" for c in parts}
    # accumulator slots: (name, its output vec4 index, whether this lane holds one) -- a vec4 each
    slots = [(str(c), f"{8 * c}u + lane", mine[c]) for c in parts]
    if octets:
        HD8 = HD4 // 2
        texels = range((HD8 + 7) // 8)
        slots = [(f"{c}_{e}", f"2u * ({8 * c}u + lane) + {e}u", f"{8 * c}u + lane < {HD8}u") for c in texels for e in (0, 1)]
    add_lines = []
    add = add_lines.append

    def update(k: str, v: dict, pad: str) -> None:  # the online softmax step of every head for one position
        for h in range(HG):  # (k: the lane's vec4s by part; v: by accumulator slot)
            add(f"{pad}let s{h} = subgroupAdd(" + " + ".join(f"dot(q{h}_{c}, {k.format(c=c)})" for c in parts) + ");")
            add(f"{pad}let n{h} = max(m{h}, s{h});")
            add(f"{pad}let c{h} = exp(m{h} - n{h});")
            add(f"{pad}let e{h} = exp(s{h} - n{h});")
            add(f"{pad}l{h} = l{h} * c{h} + e{h};")
            for name, _, _ in slots:
                add(f"{pad}a{h}_{name} = a{h}_{name} * c{h} + e{h} * {v[name]};")
            add(f"{pad}m{h} = n{h};")

    if rope:
        add("fn attend(tok: u32, head: u32, lane: u32, tb: u32) {")
        add("  let pos = min(tables[tb], tables[tb + 1u] - 1u);  // this token's position (tb + 1: the positions)")
        add("  let n = pos + 1u;")
        add("  let row = tok * (QR4 + 2u * KR4);")
        add("  let kvb = (head / GROUP) * HD4;")
        add("  let at = kv_row(tb, pos) * KR4 + kvb;")
        for c in parts:  # (kv_round: as stored, so the token's own K and V equal what later tokens read)
            add(f"  let kn{c} = kv_round(rot(qkv[row + QR4 + kvb + {idx[c]}], pos, {idx[c]}));")
            add(f"  let vn{c} = kv_round(qkv[row + QR4 + KR4 + kvb + {idx[c]}]);")
            add(f"  if (head % GROUP == 0u && {mine[c]}) {{")
            add(f"    k_put(at + {8 * c}u + lane, kn{c});")
            add(f"    v_put(at + {8 * c}u + lane, vn{c});")
            add("  }")
        own_v = {str(c): f"vn{c}" for c in parts}
        if octets:  # the token's V at the lane's accumulator slots
            own_v = {}
            for name, at, _ in slots:
                add(f"  let vs{name} = kv_round(qkv[row + QR4 + KR4 + kvb + min({at}, HD4 - 1u)]);")
                own_v[name] = f"vs{name}"
        qv = "rot(qkv[row + (head + {h}u) * HD4 + {i}], pos, {i})"
        qo = "tok * QR4 + head * HD4"
    else:
        add("fn attend(qo: u32, kvb: u32, t: u32, lane: u32, tb: u32, split: u32, part: u32) {")
        add("  let n = min(tables[tb] + t + 1u, tables[tb + 1u]);")
        qv = "q[qo + {h}u * HD4 + {i}]"
        qo = "qo"
    add("  let first = window_start(n);")
    end = "pos" if rope else "n"
    lo, hi = "first", end
    if split:  # this split's run of whole blocks of 8 positions
        add("  let chunk = ((n - first + SPLITS - 1u) / SPLITS + 7u) & ~7u;")
        add("  let lo = min(first + split * chunk, n);")
        add("  let hi = min(lo + chunk, n);")
        lo, hi = "lo", "hi"
    for h in range(HG):
        if rope:
            for c in parts:
                add(f"  let q{h}_{c} = select(vec4<f32>(0.0), {qv.format(h=h, i=idx[c])} * SCALE, {mine[c]});")
        for name, _, _ in slots:
            add(f"  var a{h}_{name} = vec4<f32>(0.0);")
        add(f"  var m{h} = LOW;")
        add(f"  var l{h} = 0.0;")
    # Blocks of 8 positions, one a lane: each lane's score from the whole K row of its position (q held
    # whole in every lane), one max and one exp per block and head (not per position), then
    # the 8 positions' V rows added to the lanes' output vec4s with the weights broadcast.
    full = "rot(qkv[row + (head + {h}u) * HD4 + {i}u], pos, {i}u)" if rope else "q[qo + {h}u * HD4 + {i}u]"
    for h in range(HG):
        for i in range(HD4):
            add(f"  let qf{h}_{i} = {full.format(h=h, i=i)} * SCALE;")
    if touch:
        add("  var touched = 0u;  // the xor of the V words touched (stored into sink: the loads stay)")
    add(f"  for (var b = {lo}; b < {hi}; b += 8u) {{")
    add(f"    let p = min(b + lane, {hi} - 1u);")
    add(f"    let live = b + lane < {hi};")
    add("    let ka = kv_row(tb, p) * KR4 + kvb;")
    if touch:  # a word of each 64-byte line of this lane's V row: 8 rows' cache misses in one wait
        add("    touched ^= " + " ^ ".join(f"v_touch(ka + {i}u)" for i in range(0, HD4, touch)) + ";")
    for h in range(HG):
        add(f"    var t{h} = vec4<f32>(0.0);")
    for i in range(HD4):
        if not octets:
            add(f"    let kk{i} = k_at(ka + {i}u);")
        elif hex_k and i % 4 == 0:  # one load: vec4s i .. i + 3 (ka is a multiple of 4: KR4 and kvb are)
            add(f"    let kh{i} = k_hex(ka / 4u + {i // 4}u);")
        elif not hex_k and i % 2 == 0:  # one texel: vec4s i and i + 1 (ka is even: KR4 and kvb are)
            add(f"    let ko{i} = k_oct(ka / 2u + {i // 2}u);")
        kk = f"kh{i - i % 4}[{i % 4}]" if hex_k else f"ko{i - i % 2}[{i % 2}]" if octets else f"kk{i}"
        for h in range(HG):
            add(f"    t{h} += qf{h}_{i} * {kk};")
    for h in range(HG):
        add(f"    let s{h} = select(LOW, t{h}.x + t{h}.y + t{h}.z + t{h}.w, live);")
        add(f"    let n{h} = max(m{h}, {lanes_max(f's{h}')});")
        add(f"    let c{h} = exp(m{h} - n{h});")
        add(f"    let e{h} = select(0.0, exp(s{h} - n{h}), live);")
        add(f"    l{h} = l{h} * c{h} + e{h};  // this lane's share of the sum (c is the same in every lane)")
        for name, _, _ in slots:
            add(f"    a{h}_{name} *= c{h};")
        add(f"    m{h} = n{h};")
    for j in range(8):
        add(f"    let r{j} = subgroupBroadcast(ka, {j}u);")
        if octets:
            for c in texels:
                add(f"    let vo{j}_{c} = v_oct(r{j} / 2u + min({8 * c}u + lane, {HD8 - 1}u));")
            vals = {f"{c}_{e}": f"vo{j}_{c}[{e}]" for c in texels for e in (0, 1)}
        else:
            for c in parts:
                add(f"    let v{j}_{c} = v_at(r{j} + {idx[c]});")
            vals = {str(c): f"v{j}_{c}" for c in parts}
        for h in range(HG):
            add(f"    let w{j}_{h} = subgroupBroadcast(e{h}, {j}u);")
            for name, _, _ in slots:
                add(f"    a{h}_{name} += w{j}_{h} * {vals[name]};")
    add("  }")
    if touch:
        add("  atomicXor(&sink, touched);")
    for h in range(HG):
        add(f"  l{h} = subgroupAdd(l{h});")
    if rope:
        add("  {  // the token's own position")
        update("kn{c}", own_v, "    ")
        add("  }")
    for h in range(HG):
        if split:  # part + h: this head's record of HD4 + 1 vec4s (output, then (max, sum))
            add(f"  let pr{h} = (part + {h}u * SPLITS) * (HD4 + 1u);")
            add(f"  if (lane == 0u) {{ parts[pr{h} + HD4] = vec4<f32>(m{h}, l{h}, 0.0, 0.0); }}")
        for name, at, held in slots:
            where = f"parts[pr{h} + {at}] = a{h}_{name}" if split else f"o[{qo} + {h}u * HD4 + {at}] = a{h}_{name} / l{h}"
            add(f"  if ({held}) {{ {where}; }}")
    add("}")
    return "\n".join(add_lines)


def lanes_max(v: str) -> str:
    """WGSL for the max of f32 `v` over lanes 0..7, from subgroupBroadcasts: on lavapipe subgroupMax is a loop over
    the lanes with a branch each, a broadcast one extract (decode attention at context 2000: 0.97x the time)."""
    terms = [f"subgroupBroadcast({v}, {j}u)" for j in range(8)]
    while len(terms) > 1:
        terms = [f"max({a}, {b})" for a, b in zip(terms[::2], terms[1::2])]
    return terms[0]


def lane_heads(group: int) -> int:
    """Query heads per workgroup of attention_decode_lanes.wgsl: the most (up to 4) that split a KV head's group."""
    return max(h for h in range(1, 5) if group % h == 0)


def four_rows(fmt: str, R: int, rows: int) -> bool:
    """Whether a kernel of R rows an invocation over `rows` rows of format `fmt` fetches scales 4 rows at once.

    The texture formats keep 4 rows' scale words in one texel (shaders/blocks/texture_weights.wgsl):
    one fetch instead of four (a 1-channel fetch is a hardware gather on lavapipe, slower than a
    4-channel one). Needs invocations that start on a multiple of 4 rows.
    """
    return fmt in FOUR_ROW_FORMATS and R % 4 == 0 and rows % 4 == 0


@lru_cache(maxsize=None)
def matvec_rows(R: int, four: bool, per_call: int = 2) -> dict:
    """matvec_decode.wgsl's row code for R rows an invocation: the accumulators (ACC), block b's dot
    added to each (ROW_DOTS) and the epilogue calls, `per_call` rows each (ROWS_OUT, see epilogue_calls).

    The R accumulators are named f32 registers acc0 .. acc{R-1}, unrolled here, not an array<f32, R>:
    naga decorates every array type with an ArrayStride, which Vulkan forbids on a function variable
    (VUID-StandaloneSpirv-None-10684, reported by the Khronos validation layer; see
    tests/runtime/test_vulkan_validation.py), and lavapipe keeps a loop-indexed array in memory anyway
    (tile_code): the default model's decode pass took 34.9-36.5 vs 41.9-42.6 ms with the loop over an
    array (benchmarks/kernels.py, context 100, alternating runs on lavapipe): gate/up 8.0-8.4 vs
    10.1-10.2 ms, the logits 7.0-8.4 vs 10.1-10.5 ms, the same tokens and bit-equal logits.
    """
    args = "x0, x1, x2, x3, x4, x5, x6, x7, xsum"
    dots = []
    for rr in range(R):
        wb = f"(r0 + {rr}u) * (NB * WB) + b * WB"
        if not four:
            dots.append(f"    acc{rr} += block_dot({wb}, {args});")
            continue
        if rr % 4 == 0:  # one scale fetch for rows rr .. rr + 3
            dots.append(f"    let sw{rr} = block_scales4(r0 + {rr}u, b);")
        dots.append(f"    acc{rr} += block_dot_dm({wb}, dm_of4(sw{rr - rr % 4}, r0 + {rr - rr % 4}u, b, {rr % 4}u), {args});")
    out = ["    " + call for call in epilogue_calls(R, "0u", [f"acc{rr}" for rr in range(R)], per_call)]
    return {"ACC": "\n".join(f"  var acc{rr} = 0.0;" for rr in range(R)), "ROW_DOTS": "\n".join(dots),
            "ROWS_OUT": "\n".join(out)}


@lru_cache(maxsize=None)
def matvec_x(lanes: int) -> dict:
    """matvec_decode.wgsl's x code: the norm's 1/rms (X_SCALE) and a block's 8 x vec4s x0..x7 (X_BLOCK).

    lanes > 0 (a subgroup of at least that many lanes, all active -- past the rows an invocation runs
    on and stores nothing): lane l loads vec4 l % 8 of the block and its norm weight, the lanes split
    the sum of squares (a subgroupAdd), and subgroupBroadcast hands the 8 vec4s to every lane -- on
    lavapipe two loads a block instead of sixteen: the default model's decode matvecs took 0.79-0.89x
    the time (microbench, texture weights, same R). Else every lane loads all 8 and its norm weights.
    """
    def scale(squares: str, total: str) -> str:  # X_SCALE: sum the squares of x, then 1 / rms
        return (f"  var scale = 1.0;\n  if (NORM) {{\n    var ss = 0.0;\n    {squares}\n"
                f"    scale = inverseSqrt({total} / f32(NB * 32u) + EPS);\n  }}")

    if lanes:
        block = ["    var xl = x[b * 8u + (lane & 7u)];",
                 "    if (NORM) { xl *= scale * norm_w[b * 8u + (lane & 7u)]; }"]
        block += [f"    let x{j} = subgroupBroadcast(xl, {j}u);" for j in range(8)]
        return {"LANE": ", @builtin(subgroup_invocation_id) lane: u32", "GUARD": "",
                "X_SCALE": scale("if (lane < 8u) { for (var k = lane; k < NB * 8u; k += 8u) { ss += dot(x[k], x[k]); } }",
                                 "subgroupAdd(ss)"),
                "X_BLOCK": "\n".join(block)}
    block = [f"    var x{j} = x[b * 8u + {j}u];" for j in range(8)]
    block.append("    if (NORM) {")
    block += [f"      x{j} *= scale * norm_w[b * 8u + {j}u];" for j in range(8)]
    block.append("    }")
    return {"LANE": "", "GUARD": "  if (!live) { return; }",
            "X_SCALE": scale("for (var k = 0u; k < NB * 8u; k++) { ss += dot(x[k], x[k]); }", "ss"),
            "X_BLOCK": "\n".join(block)}


def matmul_params(R: int, TB: int, lanes: int, x_vec4s: int | None, four: bool = False,
                  norm: tuple | None = None, per_call: int = 2, texels: int = 0) -> dict:
    """matmul.wgsl's generated parameters: the tile, the lane builtin on the subgroup path, and x's
    binding -- a uniform window of x_vec4s vec4s, or (None) a storage binding of every token.

    norm = (vec4s a row, eps): the RMSNorm folded in (tile_code), its weights at binding 14. texels: a
    texture format's texels a block (tile_code), 0 for a storage format.
    """
    x = f"var<uniform> x: array<vec4<f32>, {x_vec4s}>;" if x_vec4s else "var<storage, read> x: array<vec4<f32>>;"
    if norm:
        x += (f"\n@group(0) @binding(14) var<uniform> norm_w: array<vec4<f32>, {norm[0]}>;"
              f"\nconst EPS: f32 = {float(norm[1])!r};")
    return {"TILE": tile_code(R, TB, lanes, four, norm is not None, per_call, texels), "TB": TB, "X_BINDING": x,
            "LANE": ", @builtin(subgroup_invocation_id) lane: u32" if lanes else ""}
