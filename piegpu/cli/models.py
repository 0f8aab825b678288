"""`piegpu models`: the models on this machine by the names load_model and -m take; `piegpu models pull NAME`."""

from __future__ import annotations

import json
import sys

COLUMNS = (("NAME", "name"), ("ARCH", "architecture"), ("PARAMS", "parameters"), ("QUANT", "quantization"),
           ("CTX", "context_train"), ("SIZE", "size_bytes"), ("RUNS", "runnable"), ("WHERE", "path"))


def _human(n: int | None, unit: str = "") -> str:
    if not n:
        return "-"
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.1f}{suffix}{unit}"
    return f"{n}{unit}"


def _cell(row: dict, key: str) -> str:
    v = row.get(key)
    if key == "parameters":
        return _human(v)
    if key == "size_bytes":
        return _human(v, "B")
    if key == "runnable":
        return "yes" if v else "no*"
    if key == "architecture":
        return str(v or "?").removesuffix("ForCausalLM")
    return "-" if v is None else str(v)


def print_table(rows: list[dict], out=None) -> None:
    """The rows as a text table (on stdout by default); why a model cannot run is footnoted below it."""
    out = out or sys.stdout
    table = [[h for h, _ in COLUMNS]] + [[_cell(r, k) for _, k in COLUMNS] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS) - 1)]
    for line in table:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)) + "  " + line[-1], file=out)
    for r in rows:
        if not r.get("runnable"):
            print(f"* {r['name']}: {r.get('reason')}", file=out)


def _cmd_models(args) -> int:
    from ..model.sources.catalog import rows
    if args.action == "pull":
        return _cmd_pull(args)
    found = rows()
    if args.json:
        json.dump(found, sys.stdout, indent=1)
        print()
    elif not found:
        print("no models found (Hugging Face cache, Ollama's store, LM Studio's folder, piegpu's cache); get one with "
              "`piegpu models pull org/repo:QUANT`")
    else:
        print_table(found)
    return 0


def _cmd_pull(args) -> int:
    from ..errors import ModelError
    from ..model.sources import parse_hf, resolve
    name = args.name
    if name.startswith(("ollama:", "lmstudio:")):
        raise ModelError(f"{name}: piegpu reads Ollama's and LM Studio's stores but never writes them. Fix: "
                         f"`ollama pull` / LM Studio's download for those, or pull a Hugging Face repo id here")
    if parse_hf(name) is None:
        raise ModelError(f"{name}: not a Hugging Face repo id. Fix: org/repo[:QUANT][@REVISION]")
    where = resolve(name, lambda msg: print(f"piegpu: {msg}", file=sys.stderr, flush=True))
    print(where.path)
    return 0


def add_parser(sub) -> None:
    """Register `piegpu models` and `piegpu models pull` on the subparsers `sub`."""
    m = sub.add_parser("models", help="list the models on this machine (HF cache, Ollama, LM Studio, piegpu's cache)")
    m.add_argument("--json", action="store_true", help="one JSON object per model, in a list")
    acts = m.add_subparsers(dest="action")
    p = acts.add_parser("pull", help="download a Hugging Face model into its cache (with a progress bar)")
    p.add_argument("name", help="org/repo[:QUANT][@REVISION]")
    m.set_defaults(func=_cmd_models, action=None)
