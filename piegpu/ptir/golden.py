"""Pie's compiler golden files (compiler/tests/golden/*.txt): parse one, replay it on a backend, report.

A golden file holds one or more programs (`name:`, `hash:`, `container:` hex, `verdict:`,
`readiness:` lines) and then a script: `seed`/`host_put` cells, `inputs` of a pass, the
`step` it made, and what each `take` got. check_golden replays the script on piegpu
(interp, wgsl or spirv) and compares the verdict, the hash, the round trip through eta,
the readiness table, every step and every take. Pie's `plan:` and `class:` lines describe
Pie's own kernel plan and storage layout, not behaviour, and are not compared.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from .runner import Instance, detach
from .translate import load, profile_for
from .validate import PtirRejected, not_provided, readiness
from .wire import decode, encode, fnv1a64

NP = {"F32": np.float32, "I32": np.int32, "U32": np.uint32, "Bool": np.bool_}
NOT_PROVIDED = ("IntrinsicUnavailable", "KernelUnavailable", "StageUnavailable")
_VALUE = re.compile(r"(F32|I32|U32|Bool)\(\[([^\]]*)\]\)")


def parse_value(text: str) -> np.ndarray:
    """`I32([1, 2])`, `F32([0.5, NaN, -inf])`, `Bool([true])` -> a numpy array."""
    m = _VALUE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a golden value: {text!r}")
    kind, body = m.groups()
    items = [s.strip() for s in body.split(",") if s.strip()]
    if kind == "Bool":
        return np.array([s == "true" for s in items], np.bool_)
    if kind == "F32":
        return np.array([float(s.replace("NaN", "nan")) for s in items], np.float32)
    return np.array([int(s) for s in items], NP[kind])


def format_value(v: np.ndarray | None) -> str:
    """The golden spelling of a cell (`ERR WouldBlock` for none)."""
    if v is None:
        return "ERR WouldBlock"
    kind = {np.float32: "F32", np.int32: "I32", np.uint32: "U32", np.bool_: "Bool"}[v.dtype.type]
    flat = v.reshape(-1)
    items = [("true" if x else "false") if kind == "Bool" else
             ("NaN" if math.isnan(x) else repr(float(x))) if kind == "F32" else str(int(x)) for x in flat]
    return f"{kind}([{', '.join(items)}])"


def same_value(want: str, got: np.ndarray | None) -> bool:
    """A take's expected text against a cell: exact for ints and bools, f32 within 1e-5 relative (NaN == NaN)."""
    if want.strip() == "ERR WouldBlock" or got is None:
        return want.strip() == format_value(got)
    w = parse_value(want)
    g = np.asarray(got).reshape(-1)
    if w.dtype != g.dtype or w.shape != g.shape:
        return False
    if w.dtype == np.float32:
        return bool(np.allclose(w, g, rtol=1e-5, atol=1e-7, equal_nan=True))
    return bool(np.array_equal(w, g))


def parse_inputs(text: str) -> dict:
    """A `PassInputs { logits: Some(F32([...])), ... }` line -> {intrinsic name: array or None}."""
    out = {}
    for name in ("logits", "mtp_logits", "mtp_drafts", "hidden", "value_head"):
        m = re.search(rf"\b{name}: (None|Some\((\w+\(\[[^\]]*\]\))\))", text)
        out[name] = None if m is None or m.group(1) == "None" else parse_value(m.group(2))
    for name in ("query", "attn_score"):
        m = re.search(rf"\b{name}: \[(.*?)\](?:,| \}})", text)
        out[name] = [parse_value(v) for v in _VALUE.findall(m.group(1))] if m and m.group(1) else None
    return out


@dataclass
class Program:
    """One program block of a golden file."""

    name: str
    hash: str
    container: bytes
    verdict: str
    readiness: list = field(default_factory=list)


@dataclass
class Check:
    """One compared line: where (0 for the header), what, expected, got, and whether they match."""

    line: int
    what: str
    expected: str
    got: str
    ok: bool | None = None  # None: the texts must be equal

    def __post_init__(self):
        if self.ok is None:
            self.ok = self.expected == self.got


@dataclass
class GoldenReport:
    """The result of replaying one golden file on one backend."""

    name: str
    backend: str
    checks: list = field(default_factory=list)
    unsupported: str = ""  # why piegpu cannot run it (an input or kernel its forward pass does not provide)

    @property
    def ok(self) -> bool:
        """True when the verdict, hash, round trip, readiness, every step and every take matched."""
        return not self.unsupported and all(c.ok for c in self.checks)

    @property
    def mismatches(self) -> list:
        """The checks that failed."""
        return [c for c in self.checks if not c.ok]

    def __repr__(self) -> str:
        if self.unsupported:
            return f"<GoldenReport {self.name} on {self.backend}: UNSUPPORTED: {self.unsupported}>"
        bad = self.mismatches
        head = f"<GoldenReport {self.name} on {self.backend}: {len(self.checks)} checks, "
        if not bad:
            return head + "all match>"
        lines = [f"  line {c.line}: {c.what}: expected {c.expected}, got {c.got}" for c in bad]
        return head + f"{len(bad)} differ\n" + "\n".join(lines) + ">"


def parse(text: str) -> tuple:
    """(programs, script): the program blocks and the (line number, line) script after them."""
    programs, script = [], []
    for no, line in enumerate(text.splitlines(), 1):
        key, _, rest = line.partition(": ")
        if key == "name":
            programs.append(Program(rest, "", b"", ""))
        elif key == "hash":
            programs[-1].hash = rest
        elif key == "container":
            programs[-1].container = bytes.fromhex(rest)
        elif key == "verdict":
            programs[-1].verdict = rest
        elif key == "readiness":
            programs[-1].readiness.append(rest)
        elif key not in ("plan", "class") and line.strip():
            script.append((no, line))
    if not programs:
        raise ValueError("no `name:` block: this is not a Pie compiler golden file")
    return programs, script


def _verdict(p: Program, report: GoldenReport):
    """Check one program's hash, round trip, verdict and readiness; its container and eta program if it runs."""
    c = decode(p.container)
    report.checks.append(Check(0, f"{p.name} hash", p.hash, f"0x{fnv1a64(p.container):016x}"))
    report.checks.append(Check(0, f"{p.name} round trip", "byte-identical",
                               "byte-identical" if encode(c) == p.container else "differs"))
    try:
        prog = load(p.container)
        got = "OK"
    except PtirRejected as e:
        got, prog = f"ERR {e.verdict}", None
        if p.verdict == "OK" and e.verdict.startswith(NOT_PROVIDED):
            profile = profile_for(c)
            why = f"{p.name} needs {', '.join(not_provided(c, profile))}: {profile.missing_reason}"
            report.unsupported += ("; " if report.unsupported else "") + why
            return None
    report.checks.append(Check(0, f"{p.name} verdict", p.verdict, got))
    if prog is not None:
        from .export import to_ptir
        report.checks.append(Check(0, f"{p.name} PTIR -> eta -> PTIR", "byte-identical",
                                   "byte-identical" if to_ptir(prog) == p.container else "differs"))
        mine = [f"chan={ch} phase=0x{ph:02x} dir={d}" for ch, ph, d in readiness(c)]
        report.checks.append(Check(0, f"{p.name} readiness", "; ".join(p.readiness), "; ".join(mine)))
    return None if prog is None else (c, prog)


def _pick(programs: list, label: str) -> int:
    head = label.split("-")[0]
    hits = [i for i, p in enumerate(programs) if p.name.endswith("_" + head) or p.name == head]
    return hits[0] if hits else 0


def check_golden(text: str, backend="wgsl", name: str = "") -> GoldenReport:
    """Replay one Pie golden file on `backend` ("interp", "wgsl", "spirv", "stablehlo"); the report says what matched.

    `backend` may also be a callable (eta program, [numpy inputs]) -> [outputs] that runs
    each pass somewhere else, e.g. in a browser's WebGPU.
    """
    programs, script = parse(text)
    report = GoldenReport(name or programs[0].name, getattr(backend, "__name__", backend))
    runnable = [_verdict(p, report) for p in programs]
    if report.unsupported or not all(runnable):  # a rejected container has no script to replay
        return report
    detached = [detach(prog) for _, prog in runnable]

    def fresh() -> list:
        shared: dict = {}
        return [Instance.new(c, d, shared) for (c, _), d in zip(runnable, detached)]

    instances, current, pending = fresh(), 0, {}
    for no, line in script:
        key, _, rest = line.partition(": ")
        if line.startswith("case ") or line.startswith("== "):
            instances = fresh()
        elif key.startswith("inputs "):
            current = _pick(programs, key[len("inputs "):])
            pending = parse_inputs(rest)
        elif key.startswith("step "):
            step = instances[current].step(pending, backend)
            if step.error:
                got = f"error {step.error}"
            else:
                missed = "None" if step.missed is None else f"Some(({step.missed[0]}, {step.missed[1]}))"
                got = f"committed={str(step.committed).lower()} missed={missed} sinks=0"
            report.checks.append(Check(no, key, rest, got))
        elif line.startswith(("seed chan=", "host_put chan=", "take chan=")):
            verb, _, tail = line.partition(" chan=")
            chan_s, _, value = tail.partition(" = ")
            inst = instances[current if verb == "take" else _next_program(programs, script, no)]
            if verb == "take":
                cell = inst.host_take(int(chan_s))
                report.checks.append(Check(no, f"take chan={chan_s}", value, format_value(cell),
                                           same_value(value, cell)))
            else:
                inst.host_put(int(chan_s), parse_value(value))
    return report


def _next_program(programs: list, script: list, after: int) -> int:
    """The program of the next `inputs` line after line `after` (host puts feed the next pass)."""
    for no, line in script:
        if no > after and line.startswith("inputs "):
            return _pick(programs, line.partition(": ")[0][len("inputs "):])
    return 0
