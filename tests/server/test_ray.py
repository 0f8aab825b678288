"""`piegpu serve --ray`: two Ray Serve replicas on lavapipe behind one OpenAI endpoint, driven by the openai client.

One local Ray instance per module (started by the CLI in a subprocess, LP_NUM_THREADS=1 for each
replica); a short second Ray driver (a subprocess) kills a replica and watches Ray Serve replace it.
The reference outputs come from a single `piegpu serve` run before it. Small max_tokens throughout: 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from tests.server.conftest import MODEL_ID, ServerProcess, free_port
from tests.server.rayserver import ENV, ROOT, RayServer

pytest.importorskip("ray.serve", reason="Ray Serve is not installed. Fix: pip install 'piegpu[ray]'")
openai = pytest.importorskip("openai")

CHAT = [{"role": "system", "content": "You are a terse assistant who answers in one short sentence."},
        {"role": "user", "content": "What is the capital of France?"}]
COUNT = [{"role": "user", "content": "Count from 1 to 100, separated by commas."}]
CASES = {  # name -> request: greedy and seeded, chat and completions
    "greedy chat": dict(messages=CHAT, max_tokens=10, temperature=0),
    "seeded chat": dict(messages=CHAT, max_tokens=10, temperature=0.9, seed=1234),
    "greedy completion": dict(prompt="Once upon a time", max_tokens=10, temperature=0),
    "seeded completion": dict(prompt="The best thing about the sea is", max_tokens=10, temperature=1.0, top_p=0.9,
                              seed=77),
}

NO_EOS = {"0": -100, "2": -100}  # <|endoftext|>, <|im_end|>: the kill test's answers run to max_tokens
KILL_CASES = {"count": dict(messages=COUNT, max_tokens=64, temperature=0.7, seed=5, logit_bias=NO_EOS),  # stream's prefix
              "fresh": dict(prompt="A short list of rivers in Europe:", max_tokens=10, temperature=0)}  # unseen


def ask(client, case: dict):
    """(text, finish_reason, raw response) of one non-streaming request."""
    if "messages" in case:
        raw = client.chat.completions.with_raw_response.create(model=MODEL_ID, **case)
        r = raw.parse()
        return r.choices[0].message.content, r.choices[0].finish_reason, raw
    raw = client.completions.with_raw_response.create(model=MODEL_ID, **case)
    r = raw.parse()
    return r.choices[0].text, r.choices[0].finish_reason, raw


@pytest.fixture(scope="module")
def reference(default_model):
    """Each case's output from a single `piegpu serve` (default_model: the model is installed)."""
    s = ServerProcess()
    try:
        client = s.client(timeout=300)
        out = {name: ask(client, case)[:2] for name, case in CASES.items()}
        out["count"] = ask(client, KILL_CASES["count"])[:2]
        out["fresh"] = ask(client, KILL_CASES["fresh"])[:2]
    finally:
        s.stop()
    return out


@pytest.fixture(scope="module")
def ray_server(reference):
    s = RayServer(2)
    yield s
    assert s.stop() == 0, "".join(s.log[-40:])


# ---- bad input: a clear error before anything starts ---------------------------------------------

def _cli(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "piegpu", "serve", *flags], cwd=ROOT, env=ENV, text=True,
                          capture_output=True, timeout=60)


def test_zero_replicas_is_refused_at_parse_time():
    r = _cli("--ray", "--replicas", "0")
    assert r.returncode == 2 and "--replicas: must be an int >= 1, got 0" in r.stderr


def test_unreachable_address_is_refused_before_ray_starts():
    t0 = time.time()
    r = _cli("--ray", "--address", f"127.0.0.1:{free_port()}")
    assert r.returncode == 2, r.stderr
    assert "cannot reach a Ray cluster at 127.0.0.1:" in r.stderr and "ray start --head" in r.stderr
    assert "Started" not in r.stderr and time.time() - t0 < 30  # no local instance was started meanwhile
    r = _cli("--ray", "--address", "nonsense")
    assert r.returncode == 2 and "is not HOST:PORT" in r.stderr


def test_ray_flags_need_ray():
    r = _cli("--replicas", "2")
    assert r.returncode == 2 and "--replicas only work with --ray" in r.stderr


# ---- two replicas ---------------------------------------------------------------------------------

def test_outputs_equal_a_single_server(ray_server, reference):
    client = ray_server.client()
    seen = set()
    for name, case in CASES.items():
        text, reason, raw = ask(client, case)
        assert (text, reason) == reference[name], name
        seen.add(raw.headers["x-piegpu-replica"])
    # a stream gives the same text too
    chunks = client.chat.completions.create(model=MODEL_ID, stream=True, **CASES["seeded chat"])
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == reference["seeded chat"][0]
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL_ID]


def test_second_chat_turn_lands_on_the_same_replica_with_cached_tokens(ray_server):
    client = ray_server.client()
    for topic in ("the moon", "a lighthouse"):  # two conversations: each keeps its replica
        turn = [{"role": "system", "content": f"You are an expert on {topic}. Answer in a few words."},
                {"role": "user", "content": f"Tell me one fact about {topic}."}]
        raw = client.chat.completions.with_raw_response.create(model=MODEL_ID, messages=turn, max_tokens=8,
                                                              temperature=0)
        first = raw.parse()
        replica = raw.headers["x-piegpu-replica"]
        turn += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "And another one?"}]
        raw2 = client.chat.completions.with_raw_response.create(model=MODEL_ID, messages=turn, max_tokens=8,
                                                               temperature=0)
        second = raw2.parse()
        assert raw2.headers["x-piegpu-replica"] == replica
        cached = second.usage.prompt_tokens_details.cached_tokens
        assert cached > first.usage.prompt_tokens // 2, (cached, first.usage, second.usage)


KILL = """
import ray, sys
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
ray.kill(ray.get_actor("SERVE_REPLICA::piegpu#PiegpuReplica#" + sys.argv[2], namespace="serve"), no_restart=True)
"""
REPLACED = """
import json, sys, time
import ray
from ray import serve
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
t0 = time.time()
while True:
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if a["name"].startswith("SERVE_REPLICA::piegpu#PiegpuReplica#")]
    states = serve.status().applications["piegpu"].deployments["PiegpuReplica"].replica_states
    if (len(names) == 2 and not any(n.endswith(sys.argv[2]) for n in names)
            and states.get("RUNNING") == 2) or time.time() - t0 > 240:
        break
    time.sleep(1.0)
print(json.dumps({"names": names, "states": {str(k): v for k, v in states.items()}, "s": time.time() - t0}))
"""


def _driver(ray_server, code: str, *args: str) -> str:
    """Run `code` as a second Ray driver joined to the server's local instance (Ray's default token auth)."""
    r = subprocess.run([sys.executable, "-c", code, ray_server.gcs, *args], cwd=ROOT, env=ENV, text=True,
                       capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_killed_replica_retries_requests_and_cuts_streams(ray_server, reference):
    client = ray_server.client()
    before = ray_server.stats()
    # a stream on some replica: read until a token arrived; the response header says which replica serves it
    raw = client.chat.completions.with_raw_response.create(model=MODEL_ID, messages=COUNT, max_tokens=200,
                                                          temperature=0.7, seed=9, logit_bias=NO_EOS, stream=True)
    victim = raw.headers["x-piegpu-replica"]
    stream = iter(raw.parse())
    got = ""
    while not got:
        c = next(stream)
        got += (c.choices[0].delta.content or "") if c.choices else ""
    results: dict = {}

    def run(name: str) -> None:
        try:
            results[name] = ask(ray_server.client(), KILL_CASES[name])
        except Exception as e:  # noqa: BLE001 -- asserted below
            results[name] = e
    # the stream's prefix: affinity sends it to the victim; an unseen prompt goes to the less loaded other one
    threads = [threading.Thread(target=run, args=(name,)) for name in ("count", "fresh")]
    for t in threads:
        t.start()
    time.sleep(2.0)  # both routed and running
    _driver(ray_server, KILL, victim)
    with pytest.raises(openai.APIError, match="cut off"):
        for c in stream:
            got += (c.choices[0].delta.content or "") if c.choices else ""
    assert got  # the tokens it sent stand
    for t in threads:
        t.join(300)
    text, reason, raw_count = results["count"]
    assert (text, reason) == reference["count"]  # retried elsewhere with the same seed: the same output
    assert raw_count.headers["x-piegpu-attempts"] == "2" and raw_count.headers["x-piegpu-replica"] != victim
    text, reason, raw_fresh = results["fresh"]
    assert (text, reason) == reference["fresh"] and raw_fresh.headers["x-piegpu-attempts"] == "1"
    after = ray_server.stats()
    assert after["requests"] - before["requests"] == 3 and after["retried"] - before["retried"] == 1
    assert after["streams_broken"] - before["streams_broken"] == 1 and after["failed"] == before["failed"]
    # Ray Serve starts a replica in the dead one's place, and the endpoint serves on
    state = json.loads(_driver(ray_server, REPLACED, victim))
    assert len(state["names"]) == 2 and state["states"].get("RUNNING") == 2, state
    assert ask(client, CASES["greedy chat"])[:2] == reference["greedy chat"]


DEVICE_LOST = """
import asyncio, json
from piegpu.server.ray.replica import DeviceLost, PiegpuReplica
from piegpu.server.ray.routed import routed_request

replica = PiegpuReplica()  # what a Ray Serve replica runs, here in a process of its own
body = json.dumps({"model": replica.model_id, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
                   "temperature": 0}).encode()

async def call():
    req = routed_request("POST", "/v1/chat/completions", b"", [("content-type", "application/json")], body)
    return [x async for x in replica.http(req)]

assert asyncio.run(call())[0]["status"] == 200 and replica.health_problem() is None
replica.check_health()
replica.model.gpu.device.destroy()  # a real device loss, as wgpu reports it
head = asyncio.run(call())[0]
try:
    replica.check_health()
except DeviceLost as e:
    print(json.dumps({"status": head["status"], "unhealthy": str(e)}))
"""


def test_a_replica_whose_device_is_lost_reports_unhealthy(default_model):
    """The replica's Ray Serve health check fails once its device is lost (Serve then replaces the replica)."""
    r = subprocess.run([sys.executable, "-c", DEVICE_LOST], cwd=ROOT, env=ENV, text=True, capture_output=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip(), r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == 500  # the request that met the lost device fails with the cause
    assert "is unhealthy" in out["unhealthy"] and "the GPU device is lost" in out["unhealthy"]
