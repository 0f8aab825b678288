"""`benchmarks/serve.py --ray`: piegpu on Ray Serve with 1 and 2 replicas, prefix-affinity routing on and off.

For each setup -- 1 replica; 2 replicas with prefix-affinity routing; 2 replicas with Ray Serve's default
router (power of two choices, load only) -- it starts `piegpu serve --ray` (a local Ray instance,
LP_NUM_THREADS=1 per replica) and measures, with the official openai client:

- throughput: C clients streaming chat requests (serve.py's run_clients): tokens/s, TTFT p50/p95;
- prefix reuse: K multi-turn chats, each with a system prompt of its own, T turns each, 2 requests in flight
  (the next turn of a chat drawn at random):
  the prefix hit rate (prompt tokens whose KV came from a replica's cache / all prompt tokens) and how
  many follow-up turns landed on the replica that served the turn before.

On a machine whose replicas share the same cores (CI: 2 cores) the throughput columns say what this
machine does, not how replicas scale: report them, do not read scaling into them.

    python benchmarks/serve.py --ray [--clients 4] [--requests 2] [--tokens 32] [--chats 8] [--turns 3] [--json]
"""

from __future__ import annotations

import json
import random
import threading
import time

SETUPS = (("1 replica", 1, []), ("2 replicas, affinity", 2, []), ("2 replicas, no affinity", 2, ["--no-affinity"]))
# requests of the chat workload in flight at once. Each worker takes the next turn of a chat drawn at random:
# with closed-loop clients that each own one chat, a load-only router keeps a chat on its replica by accident
# (the replica its client is not using is the least loaded one)
CHAT_CLIENTS = 2
SUBJECTS = ["astronomy", "baking bread", "sailing", "chess openings", "volcanoes", "jazz piano", "beekeeping",
            "medieval castles", "origami", "coral reefs", "typography", "glaciers"]


def system_prompt(subject: str) -> str:
    """A system prompt of about 120 tokens that no other chat shares."""
    return (f"You are a patient tutor whose only subject is {subject}. You explain {subject} to curious adults "
            f"in plain words, one idea at a time, and you never change the subject away from {subject}. When "
            "you are unsure, you say so. You keep every answer short: two or three sentences at most, no lists, "
            "no headings, no code. You end each answer with a question that invites the learner to go one "
            f"step further into {subject}. You remember what was said earlier in the conversation and build "
            "on it instead of repeating it.")


def run_chats(client, model: str, chats: int, turns: int, clients: int, tokens: int) -> dict:
    """`chats` conversations of `turns` turns, `clients` requests in flight, each worker taking the next turn of
    a chat drawn at random (many users, few active at once); prefix hit rate and replica stickiness."""
    lock = threading.Lock()
    rng = random.Random(0)
    count = {"prompt": 0, "cached": 0, "follow": 0, "same": 0, "follow_prompt": 0, "follow_cached": 0}
    errors: list = []
    state = {}  # chat -> [messages, turns done, replica of its last turn]
    for i in range(chats):
        subject = SUBJECTS[i % len(SUBJECTS)]
        state[i] = [[{"role": "system", "content": system_prompt(subject)},
                     {"role": "user", "content": f"What is the first thing to know about {subject}?"}], 0, None]
    busy: set = set()

    def turn(i: int) -> None:
        msgs, t, last = state[i]
        raw = client.chat.completions.with_raw_response.create(model=model, messages=msgs, max_tokens=tokens,
                                                              temperature=0.7, seed=i * 10 + t)
        r = raw.parse()
        replica = raw.headers.get("x-piegpu-replica")
        with lock:
            count["prompt"] += r.usage.prompt_tokens
            count["cached"] += r.usage.prompt_tokens_details.cached_tokens
            if last is not None:
                count["follow"] += 1
                count["same"] += replica == last
                count["follow_prompt"] += r.usage.prompt_tokens
                count["follow_cached"] += r.usage.prompt_tokens_details.cached_tokens
        msgs += [{"role": "assistant", "content": r.choices[0].message.content},
                 {"role": "user", "content": "Go on, one step further."}]
        state[i][1:] = [t + 1, replica]

    def worker() -> None:
        while True:
            with lock:
                left = [i for i in state if state[i][1] < turns]
                free = [i for i in left if i not in busy]
                if not left:
                    return
                i = rng.choice(free) if free else None
                if i is not None:
                    busy.add(i)
            if i is None:
                time.sleep(0.05)
                continue
            try:
                turn(i)
            except Exception as e:  # noqa: BLE001 -- counted and reported
                errors.append(repr(e))
                state[i][1] = turns
            finally:
                with lock:
                    busy.discard(i)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c = count
    return {"chats": chats, "turns": turns, "prompt_tokens": c["prompt"], "cached_tokens": c["cached"],
            "hit_rate": c["cached"] / c["prompt"] if c["prompt"] else 0.0, "follow_ups": c["follow"],
            "follow_up_hit_rate": c["follow_cached"] / c["follow_prompt"] if c["follow_prompt"] else 0.0,
            "same_replica": c["same"] / c["follow"] if c["follow"] else 0.0, "wall_s": time.perf_counter() - t0,
            "errors": errors}


def main(args) -> int:
    """Run every setup and print the table (args: serve.py's parsed arguments)."""
    from tests.server.rayserver import RayServer

    from serve import run_clients  # benchmarks/serve.py, on sys.path as the script's folder
    clients = int(args.clients.split(",")[-1])
    rows = []
    for name, replicas, flags in SETUPS:
        server = RayServer(replicas, *flags)
        try:
            client = server.client()
            model = client.models.list().data[0].id
            run_clients(client, model, clients, 1, 4, "Describe {} in one line.")  # warm-up: kernels compiled
            tput = run_clients(client, model, clients, args.requests, args.tokens)
            chats = run_chats(client, model, args.chats, args.turns, CHAT_CLIENTS, args.tokens)
            rows.append({"setup": name, "replicas": replicas, "throughput": tput, "prefix": chats,
                         "ingress": server.stats()})
        finally:
            server.stop()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"piegpu serve --ray (local Ray, LP_NUM_THREADS=1 per replica): {clients} clients; throughput: "
          f"{args.requests} streamed chats per client, max_tokens {args.tokens}; prefix: {args.chats} chats x "
          f"{args.turns} turns ({CHAT_CLIENTS} at a time), own system prompt each, max_tokens {args.tokens}")
    print(f"{'setup':<24} {'tokens/s':>8} {'TTFT p50':>9} {'TTFT p95':>9} {'prefix hit':>10} "
          f"{'follow-up hit':>13} {'same replica':>12} {'retried':>7}")
    for r in rows:
        t, p = r["throughput"], r["prefix"]
        errs = len(t["errors"]) + len(p["errors"])
        print(f"{r['setup']:<24} {t['tokens_per_s']:>8.1f} {t['ttft_p50_s']:>8.2f}s {t['ttft_p95_s']:>8.2f}s "
              f"{p['hit_rate']:>10.1%} {p['follow_up_hit_rate']:>13.1%} {p['same_replica']:>12.1%} {r['ingress']['retried']:>7}"
              + (f"  {errs} errors" if errs else ""))
    print("prefix hit: prompt tokens whose KV a replica's cache held / all prompt tokens of the chats (follow-up "
          "hit: of turns 2..T only); same replica: follow-up turns served by the replica of the turn before. Replicas share this machine's "
          "cores: tokens/s is not a scaling figure.")
    return 0
