"""Cross-backend fuzzer: random eta programs on every backend, compared with the interpreter, for N minutes.

    python scripts/fuzz.py --minutes 10 --backends wgsl,spirv,stablehlo
    python scripts/fuzz.py --minutes 10 --engine hypothesis      # shrinking hypothesis search
    python scripts/fuzz.py --seed 123456 --count 1               # replay one seed

Each program comes from tests/progen.py (the generator the CI's differential tests use;
only exact values reach discontinuous ops, so any mismatch is a backend bug). Seeds here
start far from the CI's 0..499 and programs are deeper (--max-ops). Every program is also
round-tripped through its canonical bytes and one random bit flip of them (which must
either decode to a valid, canonical program or raise ValidationError).

A mismatch is minimized (tests/reliability/crossbackend.py: keep one failing output, cut
nodes into inputs while it still fails) and written to --out as a readable report.
Exit status: 0 when every program agreed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def bytes_check(prog, rng: np.random.Generator) -> str | None:
    """Round trip and one bit flip of the program bytes; the problem, or None."""
    from piegpu import eta
    from piegpu.errors import ValidationError
    data = prog.to_bytes()
    if eta.Program.from_bytes(data).to_bytes() != data:
        return "round trip changed the bytes"
    flipped = bytearray(data)
    pos = int(rng.integers(0, len(data)))
    flipped[pos] ^= 1 << int(rng.integers(0, 8))
    try:
        q = eta.Program.from_bytes(bytes(flipped))
    except ValidationError:
        return None
    except Exception as e:  # anything else is a decoder bug
        return f"bit flip at byte {pos}: {type(e).__name__}: {e}"
    if q.to_bytes() != bytes(flipped):
        return f"bit flip at byte {pos} decoded to a non-canonical program"
    return None


class Run:
    """Counts and failures of one fuzzing session."""

    def __init__(self, backends: list, out: Path, minimize: bool):
        self.backends, self.out, self.do_minimize = backends, out, minimize
        self.programs = 0
        self.executed: Counter = Counter()
        self.mismatches: Counter = Counter()
        self.bytes_checked = 0
        self.bytes_failures = 0
        self.reports: list = []

    def check(self, prog, inputs, exact, label: str, rng) -> None:
        """Run one program everywhere; record and minimize any mismatch."""
        from tests.reliability.crossbackend import check_all, minimize, report
        self.programs += 1
        bad = check_all(prog, inputs, exact, self.backends)
        for b in self.backends:
            self.executed[b] += 1
        for b, why in bad.items():
            self.mismatches[b] += 1
            text = f"{label}: {why}"
            if self.do_minimize:
                try:
                    mp, mi, me = minimize(prog, inputs, exact, b)
                    text += f"\n\nminimized ({len(mp.nodes)} of {len(prog.nodes)} nodes):\n{report(mp, mi, me, b)}"
                except Exception as e:  # keep the unminimized report
                    text += f"\n(minimizing failed: {type(e).__name__}: {e})"
            text += f"\n\noriginal program:\n{prog.pretty()}"
            self.out.mkdir(parents=True, exist_ok=True)
            path = self.out / f"{label.replace(' ', '-')}-{b}.txt"
            path.write_text(text + "\n")
            self.reports.append(str(path))
            print(f"MISMATCH {label} on {b} -> {path}", flush=True)
        problem = bytes_check(prog, rng)
        self.bytes_checked += 1
        if problem is not None:
            self.bytes_failures += 1
            print(f"BYTES {label}: {problem}", flush=True)

    def summary(self, seconds: float) -> dict:
        """The counts as a dict."""
        return {"seconds": round(seconds, 1), "programs": self.programs, "executed": dict(self.executed),
                "mismatches": {b: self.mismatches[b] for b in self.backends}, "bytes_checked": self.bytes_checked,
                "bytes_failures": self.bytes_failures, "reports": self.reports}


def run_seeds(run: Run, start: int, deadline: float, count: int | None, max_ops: int) -> None:
    """Seed-driven programs: seed s -> random_program(s, n_ops) with n_ops drawn from s."""
    from tests.progen import random_program
    seed = start
    while (count is None and time.time() < deadline) or (count is not None and run.programs < count):
        n_ops = 2 + seed % max(1, max_ops - 1)
        prog, inputs, exact = random_program(seed, n_ops)
        run.check(prog, inputs, exact, f"seed {seed} ops {n_ops}", np.random.default_rng(seed))
        seed += 1
        if run.programs % 200 == 0:
            print(f"  {run.programs} programs, mismatches {dict(run.mismatches) or 0}", flush=True)


def run_hypothesis(run: Run, deadline: float, max_ops: int) -> None:
    """hypothesis-driven programs (failures shrink), in rounds of 200 examples until the deadline."""
    from hypothesis import HealthCheck, given, settings
    from tests.reliability.crossbackend import check_all
    from tests.reliability.strategies import programs
    rounds = 0
    while time.time() < deadline:
        rounds += 1

        @settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(programs(max_ops=max_ops))
        def one(case):
            if time.time() >= deadline:
                return
            prog, inputs, exact = case
            run.programs += 1
            for b in run.backends:
                run.executed[b] += 1
            bad = check_all(prog, inputs, exact, run.backends)
            assert not bad, bad
        try:
            one()
        except AssertionError as e:  # hypothesis shrank it already
            for b in run.backends:
                if repr(b) in str(e):
                    run.mismatches[b] += 1
            run.out.mkdir(parents=True, exist_ok=True)
            path = run.out / f"hypothesis-round{rounds}.txt"
            path.write_text(str(e) + "\n")
            run.reports.append(str(path))
            print(f"MISMATCH (hypothesis, shrunk) -> {path}", flush=True)
        print(f"  round {rounds}: {run.programs} programs", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--backends", default="wgsl,spirv,stablehlo")
    ap.add_argument("--engine", choices=("seeds", "hypothesis"), default="seeds")
    ap.add_argument("--seed", type=int, help="first seed (default: random, printed; seeds 0..499 are the CI's)")
    ap.add_argument("--count", type=int, help="stop after this many programs instead of --minutes")
    ap.add_argument("--max-ops", type=int, default=24)
    ap.add_argument("--out", default="fuzz-failures")
    ap.add_argument("--no-minimize", action="store_true")
    ap.add_argument("--json", help="write the summary here")
    args = ap.parse_args(argv)
    from tests.reliability.crossbackend import available_backends
    wanted = [b.strip() for b in args.backends.split(",") if b.strip()]
    avail = available_backends(wanted)
    missing = {b: why for b, why in avail.items() if why is not None}
    if missing:
        print(f"backends unavailable: {missing}", file=sys.stderr)
        return 2
    import random
    start = args.seed if args.seed is not None else random.SystemRandom().randrange(10_000_000, 2**31)
    print(f"fuzz: engine {args.engine}, backends {wanted}, first seed {start}, "
          f"{args.count or ''}{' programs' if args.count else f'{args.minutes} min'}", flush=True)
    run = Run(wanted, Path(args.out), not args.no_minimize)
    t0 = time.time()
    deadline = t0 + args.minutes * 60
    if args.engine == "seeds":
        run_seeds(run, start, deadline, args.count, args.max_ops)
    else:
        run_hypothesis(run, deadline, args.max_ops)
    s = run.summary(time.time() - t0)
    s["first_seed"] = start
    print(json.dumps(s, indent=2), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(s, indent=2) + "\n")
    return 0 if not any(s["mismatches"].values()) and not s["bytes_failures"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
