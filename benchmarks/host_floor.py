"""wgpu's own host cost of a decode pass, one pass a submit against several: what grouping passes saves.

    python benchmarks/host_floor.py [--context 20] [--runs 6]

The default model's B=1 decode plan (the dispatches of one token, no epilogue) is replayed
into K compute passes of ONE command encoder, finished, submitted once and waited for; the
CPU time of this thread (time.thread_time: wgpu-native runs in it) is split into recording +
finish, submit, and wait + read, per pass. K = 1 is one pass a submit (the pipeline at window
1 and 2); K = 2 and 4 are the groups run_ahead submits at windows 4 and 8
(runtime/submission.py). No Python beyond the replay loop and the wgpu calls is counted: the
floor under piegpu's own per-token work.
"""

import argparse
import statistics
import time

from piegpu.runtime.dispatch import replay
from piegpu.textgen.model import load_model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=20, help="tokens already in the KV cache")
    ap.add_argument("--runs", type=int, default=6, help="timed submits per K (after one warm-up)")
    args = ap.parse_args()
    model = load_model(verbose=False)
    g = model.gpu
    ws = model.working_set(args.context + 16)
    g.forward(ws, [(7 * i) % 1000 + 100 for i in range(args.context)])
    tokens = g.token_buffer([42])
    logits, plan = g.dispatch_plan(ws, 1, tokens, (0, 1))
    plan = [e for e in plan if e[3] != "advance"]  # replaying the length advance would move the context
    dev = g.device

    def once(k: int) -> tuple:
        enc = dev.create_command_encoder()
        t0 = time.thread_time()
        for _ in range(k):
            cp = enc.begin_compute_pass()
            replay(cp, plan)
            cp.end()
        cb = enc.finish()
        t1 = time.thread_time()
        dev.queue.submit([cb])
        t2 = time.thread_time()
        dev.queue.read_buffer(logits, 0, 4)
        t3 = time.thread_time()
        return (t1 - t0) / k, (t2 - t1) / k, (t3 - t2) / k

    print(f"decode plan of {len(plan)} dispatches at context {args.context}; host CPU ms per pass (this thread)")
    rows = {k: [] for k in (1, 2, 4, 8)}
    for r in range(args.runs + 1):  # the group sizes take turns, so a slow spell lands on all of them
        for k in rows:
            m = once(k)
            if r:
                rows[k].append(m)
    for k, ms in rows.items():
        rec, sub, rd = (statistics.median(x[i] for x in ms) * 1e3 for i in range(3))
        print(f"  {k} pass(es) a submit: record + finish {rec:.3f}, submit {sub:.3f}, wait + read {rd:.3f}, "
              f"total {rec + sub + rd:.3f}")


if __name__ == "__main__":
    main()
