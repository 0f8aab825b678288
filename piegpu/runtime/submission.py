"""Encoding prepared passes and submitting them: one pass, or a group of passes in ONE command buffer and submit.

A pass's device work (forward, epilogue, KV advance) reads every length and cell position
from the device, so passes of one ForwardPass can be recorded back to back without the
host in between: a group of k passes is k compute passes, each followed by the copies of
the cells the host may take, in one command encoder, finished and submitted once. What a
group saves is wgpu's fixed cost per command buffer and per submit (finish, submit, the
wait for its index): measured on lavapipe at 152 dispatches a pass, 1.23 ms of host CPU a
pass one at a time, 0.82 in pairs, 0.61 in fours (benchmarks/host_floor.py). Each pass of
a group keeps its own id, snapshot and cells, so run_ahead accepts, discards and rewinds
passes exactly as when each had its own submit.
"""

from __future__ import annotations

from ..errors import ValidationError
from . import waits
from .device import lost_device_error
from .dispatch import replay
from .records import PreparedPass, SubmittedPass


def record_into(pipe, pp: PreparedPass, enc) -> int:
    """Record one pass's device work into `enc` as one compute pass; the dispatches it took."""
    cpass = enc.begin_compute_pass()
    tokens = pp.tokens.ensure(pipe.device)
    if len(pp.wss) == 1:
        ws = pp.wss[0]()
        logits, n = pipe.gpu.encode(cpass, ws, pp.T, tokens, pp.readout[0], pp.hidden)
        n += pp.compiled.encode(cpass, pipe._bind_group(pp, logits))
        keep = pp.keep
        n += pipe.gpu.encode_advance(cpass, ws, pp.T, keep.buffer if keep is not None else None)
    else:  # the plan advances every working set; the epilogue reads no KV length
        wss = [ref() for ref in pp.wss]
        # a LoRA bank that grew, a merge: plans made again; a pass with no adapted row: the plan without LoRA steps
        key = (tuple(pp.seqs), pipe.gpu.plan_key(wss))
        hit = pp.plans.get(key)
        if hit is None:
            seqs = [(ws, first, count) for ws, (first, count) in zip(wss, pp.seqs)]
            hit = pp.plans[key] = pipe.gpu.batch_plan(seqs, tokens, pp.readout, pp.hidden)
        replay(cpass, hit.plan)
        n = len(hit.plan) + pp.compiled.encode(cpass, pipe._bind_group(pp, hit.logits))
    cpass.end()
    return n


def record(pipe, pp: PreparedPass) -> tuple:
    """One pass's device work as its own (command buffer, dispatches): recorded ahead while earlier passes run."""
    try:
        enc = pipe.device.create_command_encoder()
        n = record_into(pipe, pp, enc)
        return enc.finish(), n
    except Exception as e:
        raise lost_device_error(e, "encoding a pass") or e


def _make_room(wss: list, seqs: list, ahead: int) -> None:
    """Check that each working set holds this pass's tokens and reserve their pages (`ahead`: tokens of the
    group's earlier passes, not yet counted in ws.length)."""
    for i, (ws, (_, count)) in enumerate(zip(wss, seqs)):
        length = ws.length + ahead * count
        if length + count > ws.max_tokens:
            who = "the working set" if len(wss) == 1 else f"sequence {i}'s working set"
            raise ValidationError(f"{who} is full: {length} + {count} tokens exceed its {ws.max_tokens} "
                                  "positions. Fix: model.working_set(max_tokens=...) with more room")
    for i, (ws, (_, count)) in enumerate(zip(wss, seqs)):
        try:  # pages for the positions this pass writes, in the page tables before its submit
            ws.reserve(ws.length + (ahead + 1) * count)
        except ValidationError as e:
            raise ValidationError(f"sequence {i} of the pass: {e}" if len(wss) > 1 else str(e)) from None


def encode_group(pipe, pp: PreparedPass, k: int, more, next_id) -> list:
    """Encode up to k passes into one submit and update the host mirror; their SubmittedPass records.

    `more()` is asked before each pass after the first (with the host mirror as the passes before
    left it): False ends the group there, as does a channel that blocks the next pass. It must not
    change the pipeline or the pass (a run's drain only reads). Callers hold the device lock and
    deferred_interrupts(). A pass that cannot be encoded (a full working set, no pages) ends the
    group before it; it is raised when it is the first. An error while encoding submits nothing and
    leaves the host mirror as before the group.
    """
    pipe._refresh_sequences(pp)
    wss = [ref() for ref in pp.wss]
    recs: list = []
    work: list = []
    enc = None
    dispatches = 0
    before = pid = fence = None  # the mirror before the group; the pass being encoded and its fence
    try:
        for i in range(k):
            if i and (not more() or pipe._blocked(pp) is not None):
                break
            try:
                _make_room(wss, pp.seqs, i)
            except ValidationError:
                if not i:
                    raise
                break  # the group ends before the pass that does not fit; the next submit raises it
            snap = {ch: ch.snapshot() for ch in pp.channels}
            snap["ws"] = [(ws, ws.length + i * count) for ws, (_, count) in zip(wss, pp.seqs)]
            before = before or snap
            # a pass recorded ahead is the group's first (its own command buffer, then this group's encoder)
            recorded, pp.recorded = (pp.recorded if not i else None), None
            pipe.stats.recorded_ahead += recorded is not None
            if recorded is not None:
                work.append(recorded[0])
                dispatches += recorded[1]
            if enc is None:
                enc = pipe.device.create_command_encoder()
            if recorded is None:
                dispatches += record_into(pipe, pp, enc)
            pid = next(next_id)
            # Host mirror: consume taken cells, then register the cells this pass puts (copied by enc).
            for slot, (takes, puts) in pp.counts.items():
                pipe.stats.staged_bytes += pp.channels[slot].commit(pid, takes, puts, enc)
            if not waits.native():  # else the pass is waited for by its submission index
                fence = pipe._fence()
                buf, off, _ = wss[0].state
                enc.copy_buffer_to_buffer(buf, off, fence, 0, 16)  # any small copy after the pass will do
            recs.append(SubmittedPass(pid, snap, fence))
            pid = fence = None
        work.append(enc.finish())
    except Exception as e:  # nothing of the group was submitted: its passes leave the host mirror
        if before is not None:
            _unmirror(pipe, pp, before, recs, pid, fence)
        err = None if isinstance(e, ValidationError) else lost_device_error(e, "encoding a pass")
        if err is not None:
            raise err from e
        raise
    try:
        index = waits.submit(pipe.device, work)
    except Exception as e:
        err = lost_device_error(e, "submitting a pass")
        for ch in pp.channels:
            ch.poison(err or e)
        if err is not None:
            raise err from e
        raise
    for ws, (_, count) in zip(wss, pp.seqs):
        ws.length += len(recs) * count
        ws.last_pass = recs[-1].pass_id  # a later rewind must not undo what these passes built on
    for rec in recs:
        rec.index = index
        for ch in pp.channels:
            ch.submitted(rec.pass_id, index)
    pp.submits += len(recs)
    pipe.stats.passes += len(recs)
    pipe.stats.submits += 1
    pipe.stats.dispatches += dispatches
    return recs


def _unmirror(pipe, pp: PreparedPass, before: dict, recs: list, pid, fence) -> None:
    """Undo the host mirror of a group that is never submitted: its encoded passes (recs) and the one being
    encoded (pid, its fence) leave every channel, whose mirror goes back to `before` (the group's first snapshot)."""
    ids = {rec.pass_id for rec in recs} | ({pid} if pid is not None else set())
    for ch in pp.channels:
        ch.unmirror(before[ch], ids)
    for rec in recs:
        pipe._reuse_fence(rec)
    if fence is not None:
        pipe._fences.append(fence)
