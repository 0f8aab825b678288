"""Regenerate the shared golden corpus and the op-table export the JS SDK is checked against.

    python -m tests.sdk.make_corpus          # writes tests/sdk/golden/corpus.json and sdk/js/src/optable.json

tests/sdk/test_corpus.py regenerates both in memory and fails when the committed files
differ, so neither can go stale; the JS tests (sdk/js/test) match every byte of the corpus.
"""

from __future__ import annotations

import json
from pathlib import Path

from piegpu import eta
from piegpu.dtypes import dtype
from piegpu.errors import ValidationError
from piegpu.eta.ops import OPS, GroupOp, TType, infer
from piegpu.eta.program import MAGIC, MAX_NAME_BYTES, VERSION
from tests.sdk.programs import PROGRAMS

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "sdk" / "golden" / "corpus.json"
OPTABLE = ROOT / "sdk" / "js" / "src" / "optable.json"


def corpus() -> dict:
    """name -> {hash, hex} of every corpus program, traced now."""
    entries = []
    for name, build in PROGRAMS.items():
        prog = build()
        entries.append({"name": name, "hash": prog.hash, "bytes": len(prog.to_bytes()), "hex": prog.to_bytes().hex()})
    return {"format": MAGIC.decode(), "version": VERSION,
            "about": "eta containers traced by tests/sdk/programs.py; regenerate with python -m tests.sdk.make_corpus",
            "programs": entries}


def dtype_rule(name: str) -> dict | None:
    """For an op whose inputs all share one dtype and that has no attributes: input dtype -> result dtype
    (None where rejected), with the rule's wording of what it needs and the fix, probed from its type rule."""
    d = OPS[name]
    if d.attrs or d.arity not in (1, 2) or d.kind not in ("elementwise", "reduce", "scan"):
        return None
    out, need, fix = {}, None, None
    for dt in dtype:
        if dt == dtype.f16:
            continue
        try:
            out[dt.name] = infer(name, [TType(dt, (2,))] * d.arity, {}).dtype.name
        except ValidationError as e:  # "<op>: needs <what> input, got <type>. Fix: <fix>"
            out[dt.name] = None
            msg = str(e)
            need = msg.split(": needs ", 1)[1].split(" input, got ", 1)[0]
            fix = msg.split(". Fix: ", 1)[1]
    return {"result": out, "needs": need, "fix": fix}


def optable() -> dict:
    """The op table of piegpu/eta/ops.py as data: names, kinds, arities, attributes, groups, dtype codes."""
    groups = {k: list(v) for k, v in vars(GroupOp).items() if k.isupper()}
    return {
        "format": MAGIC.decode(), "version": VERSION, "max_name_bytes": MAX_NAME_BYTES,
        "about": "generated from piegpu/eta/ops.py by python -m tests.sdk.make_corpus; do not edit",
        "dtypes": {d.name: d.code for d in dtype if d.name != "f16"},
        "ops": [{"name": d.name, "kind": d.kind, "arity": d.arity, "attrs": [list(a) for a in d.attrs],
                 "runtime": d.runtime, "expensive": d.expensive, "dtype_rule": dtype_rule(d.name)}
                for d in OPS.values()],
        "groups": groups,
        "python_api": sorted(eta.__all__),  # the JS package exports each under jsName(name) (sdk/js/test)
    }


def dumps(obj: dict) -> str:
    """The committed text: stable key order, one list entry (op, program) per line."""
    lines = ["{"]
    items = list(obj.items())
    for i, (k, v) in enumerate(items):
        sep = "," if i < len(items) - 1 else ""
        if isinstance(v, list):
            body = ",\n".join("  " + json.dumps(x) for x in v)
            lines.append(f" {json.dumps(k)}: [\n{body}\n ]{sep}")
        else:
            lines.append(f" {json.dumps(k)}: {json.dumps(v)}{sep}")
    return "\n".join(lines) + "\n}\n"


def main() -> None:
    CORPUS.parent.mkdir(parents=True, exist_ok=True)
    OPTABLE.parent.mkdir(parents=True, exist_ok=True)
    CORPUS.write_text(dumps(corpus()))
    OPTABLE.write_text(dumps(optable()))
    print(f"wrote {CORPUS.relative_to(ROOT)} ({len(PROGRAMS)} programs) and {OPTABLE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
