"""Moving a prepared pass over several sequences to other working sets: rows that change hands.

A continuous batch's decode pass of B rows is the same pass whichever B sequences take the
rows: the same epilogue, channels and dispatches. Only the uniform that names each row's
page-table row differs, so when a sequence leaves and another takes its row the pipeline keeps
the prepared pass and its plans and has the model rewrite those offsets (GpuModel.reseat)
instead of tracing, compiling and planning a new pass. The caller restarts the rows' channels
and sampler state from the host, as for a new pass. A pass can also let go of its working sets
(park) while it waits to be taken again, so it does not keep their KV pages alive.
"""

from __future__ import annotations

import weakref

from ..errors import ValidationError


def rebind(pipe, fwd, working_sets, live: bool = False) -> None:
    """Point `fwd` (and its prepared pass, if any) at `working_sets`, one per sequence of the pass (the caller
    holds the device lock). Passes of it in flight keep the working sets they were submitted with -- the
    offsets are rewritten by queue writes ordered after them -- but only a `live` caller (a run that reads
    their outputs knowing that, runtime/batch_run.py) may rebind then."""
    new = list(working_sets)
    pp = pipe._prepared.get(fwd)
    count = len(pp.wss) if pp is not None else len(fwd.working_sets) or len(new)
    if len(new) != count:
        raise ValidationError(f"rebind: this pass has {count} sequences, got {len(new)} working sets. Fix: a "
                              "ForwardPass of that many sequences")
    if pp is not None and not live and any(run.pp is pp for run in pipe._running):
        raise ValidationError("rebind: passes of this ForwardPass are still in flight. Fix: let its run_ahead "
                              "finish first")
    old = fwd.working_sets
    fwd.state(new, fwd.geometry)
    try:
        fwd.validate()
    except ValidationError:
        fwd.working_sets = old
        raise
    if pp is None:
        return
    pp.wss = tuple(weakref.ref(ws) for ws in new)
    pp.recorded = None  # recorded ahead for the old working sets
    if len(new) == 1:  # a one-sequence pass binds its working set's own plans
        return
    for key, plan in list(pp.plans.items()):
        moved = pipe.gpu.reseat(plan, new)
        if moved is None:
            del pp.plans[key]  # rebuilt at the next record
        else:
            pp.plans[key] = moved


def park(pipe, fwd) -> None:
    """Let `fwd` drop its working sets until rebind gives it others (its prepared pass holds them weakly)."""
    pp = pipe._prepared.get(fwd)
    if pp is not None and any(run.pp is pp for run in pipe._running):
        raise ValidationError("park: passes of this ForwardPass are still in flight. Fix: let its run_ahead "
                              "finish first")
    if pp is not None:
        pp.recorded = None
    fwd.working_sets = []
