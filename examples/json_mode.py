"""JSON mode: llguidance computes each step's token mask on the host, the device applies it.

Each step the host puts a u32[vocab/32] bitmask of the tokens that keep the text valid for
the JSON Schema into a channel; the epilogue unpacks it with gather and shifts, applies it,
and draws the token. Tokens the schema forces (keys, punctuation) are embedded unsampled.

    python examples/json_mode.py "Describe a person who lives in Paris."
    python examples/json_mode.py "List three colors." --schema '{"type": "array", "items": {"type": "string"}}'
"""

import argparse
import json
import sys

import piegpu

PERSON = {"type": "object",
          "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "city": {"type": "string"}, "hobbies": {"type": "array", "items": {"type": "string"},
                                                                 "maxItems": 3}},
          "required": ["name", "age", "city"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompt", nargs="?", default="Describe a person who lives in Paris.")
    ap.add_argument("--schema", default=None, help="a JSON schema (inline JSON); default: a person record")
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    schema = json.loads(args.schema) if args.schema else PERSON
    model = piegpu.load_model()
    g = model.generate(args.prompt + " Answer in JSON.", max_tokens=args.max_tokens, chat=True, json_schema=schema)
    for piece in g:
        print(piece, end="", flush=True)
    print()
    s, gs = g.stats, g.grammar_stats
    print(f"parsed: {json.loads(g.text)!r}" if g.finish_reason == "stop" else "max_tokens ended the text",
          file=sys.stderr)
    print(f"{s.generated} tokens in {s.decode_s:.1f} s: {gs.masks} sampled under masks "
          f"({gs.mask_ms_per_token:.2f} ms/token in llguidance), {gs.forced} forced; stop: {s.stop_reason}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
