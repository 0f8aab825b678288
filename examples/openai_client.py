"""Talk to `piegpu serve` with the official openai client -- the same code works against vLLM or llama.cpp's server.

Start the server in another terminal (it binds 127.0.0.1:8000 by default):

    piegpu serve

then run this file. Only base_url names piegpu: point it at another OpenAI-compatible server
and nothing else changes.
"""

from __future__ import annotations

import json
import os

import openai

client = openai.OpenAI(base_url=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"),
                       api_key=os.environ.get("OPENAI_API_KEY", "none"))


def main() -> None:
    """A streamed chat answer, a JSON-schema answer and log-probabilities."""
    model = client.models.list().data[0].id
    print(f"model: {model}\n")

    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Give me three tips for learning to cook."}],
        max_tokens=120, temperature=0.7, top_p=0.9, seed=1, stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
        if chunk.usage:
            print(f"\n\n[{chunk.usage.completion_tokens} tokens; prompt {chunk.usage.prompt_tokens}, "
                  f"{chunk.usage.prompt_tokens_details.cached_tokens} of them reused from the prefix cache]")

    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Name a European capital as JSON."}], max_tokens=60,
        temperature=0, response_format={"type": "json_schema", "json_schema": {"name": "capital", "schema": schema}})
    print("\nJSON:", json.loads(r.choices[0].message.content))

    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Yes or no?"}],
                                       max_tokens=1, temperature=0, logprobs=True, top_logprobs=5)
    print("\nfirst token alternatives:")
    for alt in r.choices[0].logprobs.content[0].top_logprobs:
        print(f"  {alt.token!r:>12}  {alt.logprob:7.3f}")


if __name__ == "__main__":
    main()
