"""JSON mode: the host walks a JSON grammar over the vocabulary, the device masks the logits.

Each step the host puts a u32[vocab/32] bitmask of the tokens that keep the text valid
JSON (and valid for the schema) into a channel; the epilogue unpacks it with gather and
shifts, applies it, and draws the token. The output always parses and fits the schema.

    python examples/json_mode.py "Describe a person who lives in Paris."
    python examples/json_mode.py "List three colors." --schema '{"type": "array", "items": {"type": "string"}}'
"""

import argparse
import json
import sys

import piegpu
from piegpu.inferlets.json_mode import json_mode

PERSON = {"type": "object",
          "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"},
                         "hobbies": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "age", "city"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompt", nargs="?", default="Describe a person who lives in Paris.")
    ap.add_argument("--schema", default=None, help="a JSON schema (inline JSON); default: a person record")
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    schema = json.loads(args.schema) if args.schema else PERSON
    model = piegpu.load_model()
    jm = json_mode(model, schema)
    text, value = jm.generate(args.prompt + " Answer in JSON.", max_tokens=args.max_tokens, chat=True,
                              on_text=lambda piece: print(piece, end="", flush=True))
    print()
    s = jm.stats
    print(f"parsed: {value!r}", file=sys.stderr)
    print(f"{s.tokens} tokens, {s.passes} passes in {s.decode_s:.1f} s; host mask work {s.mask_s * 1000:.0f} ms "
          f"({s.new_walks} grammar states walked over the vocabulary); stop: {s.stop_reason}", file=sys.stderr)


if __name__ == "__main__":
    main()
