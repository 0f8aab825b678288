"""`piegpu serve --ray`: two Ray Serve replicas on lavapipe behind one OpenAI endpoint, driven by the openai client.

One local Ray instance per module (started by the CLI in a subprocess, LP_NUM_THREADS=1 for each
replica, Ray Serve's health check every second); short second Ray drivers (subprocesses) kill a replica,
or destroy a replica's wgpu device, and watch Ray Serve replace it. One test runs the application on a
two-node cluster of its own (ray.cluster_utils.Cluster), before the module's instance starts.
The reference outputs come from a single `piegpu serve` run before it. Small max_tokens throughout: 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request

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
REPLACEMENT_CASE = dict(prompt="The three primary colours are", max_tokens=8, temperature=0)  # first seen there
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
        out["replacement"] = ask(client, REPLACEMENT_CASE)[:2]
    finally:
        s.stop()
    return out


@pytest.fixture(scope="module")
def ray_server(reference):
    s = RayServer(2, "--health-check-s", "1")  # a replica whose device is lost: replaced in seconds
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


# ---- two nodes ------------------------------------------------------------------------------------

TWO_NODES = """
import json, sys
import ray
from ray import serve
from ray.cluster_utils import Cluster
from piegpu.server.ray import APP_NAME, build
# two Ray nodes on this machine (a head and a worker, each a raylet of its own) with one CPU each: the replicas
# reserve one CPU each, so each lands on a node of its own
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
cluster.add_node(num_cpus=1)
cluster.wait_for_nodes()
ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False, configure_logging=False)
serve.start(http_options={"host": "127.0.0.1", "port": int(sys.argv[1])}, logging_config={"log_level": "WARNING"})
serve.run(build(None, 2, env={"LP_NUM_THREADS": "1"}), name=APP_NAME, route_prefix="/")
PREFIX = "SERVE_REPLICA::piegpu#PiegpuReplica#"
node_of = {a["name"][len(PREFIX):]: ray.get(ray.get_actor(a["name"], namespace="serve").__ray_call__.remote(
    lambda _: ray.get_runtime_context().get_node_id())) for a in ray.util.list_named_actors(all_namespaces=True)
    if a["name"].startswith(PREFIX)}
print(json.dumps({"replicas": node_of, "nodes": sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])}), flush=True)
sys.stdin.readline()  # the test's requests are done
ray.shutdown()
cluster.shutdown()  # its nodes' processes, the replicas with them
"""


def test_two_nodes_serve_one_replica_each(reference):
    """The application on a two-node Ray cluster (ray.cluster_utils.Cluster on this machine): a replica on each
    node, both answering through the one endpoint with a single server's outputs."""
    port = free_port()
    drv = subprocess.Popen([sys.executable, "-c", TWO_NODES, str(port)], cwd=ROOT, env=ENV, text=True,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    guard = threading.Timer(240, drv.kill)  # a cluster stuck before its first line: EOF below, not a hang
    guard.start()
    try:
        line = drv.stdout.readline()
        guard.cancel()
        assert line.strip(), "the two-node cluster did not start: " + drv.communicate(timeout=60)[1][-3000:]
        up = json.loads(line)
        assert len(up["nodes"]) == 2 and sorted(up["replicas"].values()) == up["nodes"], up  # one per node
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=300)
        answered = set()
        for name in ("greedy chat", "seeded completion"):
            text, reason, raw = ask(client, CASES[name])
            assert (text, reason) == reference[name], name
            answered.add(raw.headers["x-piegpu-replica"])
        for _ in range(40):  # /health: the least-loaded replica, ties at random, until both nodes answered
            if answered == set(up["replicas"]):
                break
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as r:
                assert json.loads(r.read())["status"] == "ok"
                answered.add(r.headers["x-piegpu-replica"])
        assert answered == set(up["replicas"]), (answered, up)
        _, err = drv.communicate("\n", timeout=120)
        assert drv.returncode == 0, err[-3000:]
    finally:
        guard.cancel()
        if drv.poll() is None:
            drv.kill()
            drv.wait()


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
refused = []
for _ in range(2):  # the request that meets the lost device, then one after it: neither is answered here
    try:
        asyncio.run(call())
    except DeviceLost as e:
        refused.append([str(e), e.replica])
try:
    replica.check_health()
except DeviceLost as e:
    print(json.dumps({"refused": refused, "unhealthy": str(e), "name": replica.name}))
"""


def test_a_replica_whose_device_is_lost_reports_unhealthy(default_model):
    """The replica's Ray Serve health check fails once its device is lost (Serve then replaces the replica)."""
    r = subprocess.run([sys.executable, "-c", DEVICE_LOST], cwd=ROOT, env=ENV, text=True, capture_output=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip(), r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # the request that met the lost device and the next one raise DeviceLost naming the replica, before any
    # response: the ingress runs them on another replica (see the replacement test below)
    (met, met_by), (after, after_by) = out["refused"]
    assert "its response was not sent" in met and "the GPU device is lost" in met and met_by == out["name"]
    assert "it was not run" in after and after_by == out["name"]
    assert "is unhealthy" in out["unhealthy"] and "the GPU device is lost" in out["unhealthy"]


LOSE_DEVICE = """
import glob, json, os, sys, time
import ray
from ray import serve
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
PREFIX = "SERVE_REPLICA::piegpu#PiegpuReplica#"
victim = sys.argv[2]

def replicas():
    return sorted(a["name"][len(PREFIX):] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["name"].startswith(PREFIX))

def lose(actor):  # runs in the victim's process: its PiegpuReplica is Ray Serve's user callable there
    actor._replica_impl._user_callable_wrapper.user_callable.model.gpu.device.destroy()

before = replicas()
ray.get(ray.get_actor(PREFIX + victim, namespace="serve").__ray_call__.remote(lose))  # as wgpu reports a loss
print("lost", flush=True)
t0, seen, states, names = time.time(), [], {}, before
while time.time() - t0 < float(sys.argv[3]):
    d = serve.status().applications["piegpu"].deployments["PiegpuReplica"]
    status = getattr(d.status, "value", str(d.status))
    states, names = {getattr(k, "value", str(k)): v for k, v in d.replica_states.items()}, replicas()
    if not seen or seen[-1][1] != status:
        seen.append([round(time.time() - t0, 2), status, d.message])
    if victim not in names and len(names) == 2 and states.get("RUNNING") == 2 and status == "HEALTHY":
        break
    time.sleep(0.2)
replaced_at = time.time()
# why the controller failed the victim's health checks: its log has the exception check_health raised
why = []
logs = os.path.join(ray._private.worker._global_node.get_session_dir_path(), "logs", "serve")
for path in glob.glob(os.path.join(logs, "controller_*.log")):
    with open(path, errors="replace") as f:
        why += [line.strip() for line in f if f"piegpu replica {victim} is unhealthy" in line and "DeviceLost" in line]
print(json.dumps({"before": before, "names": names, "states": states, "seen": seen, "s": replaced_at - t0,
                  "replaced_at": replaced_at, "why": why[:1]}), flush=True)
"""


def test_a_replica_whose_device_is_lost_is_replaced_and_no_request_is_lost(ray_server, reference):
    """A replica's device is lost: requests it gets run on the other replica, Ray Serve's health check (every
    second here) fails on it, and a fresh replica takes its place and serves."""
    client = ray_server.client()
    before = ray_server.stats()
    _, _, raw = ask(client, CASES["greedy chat"])
    victim = raw.headers["x-piegpu-replica"]  # the chat's prefix now lives there: affinity sends it back
    watch = subprocess.Popen([sys.executable, "-c", LOSE_DEVICE, ray_server.gcs, victim, "90"], cwd=ROOT, env=ENV,
                             text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    guard = threading.Timer(240, watch.kill)  # a driver stuck before its first line: EOF below, not a hang
    guard.start()
    try:
        first = watch.stdout.readline()
        guard.cancel()
        assert first.strip() == "lost", watch.communicate(timeout=60)[1][-3000:]
        # the victim's engine meets the lost device on this request's pass: run again elsewhere, same output
        text, reason, raw = ask(client, CASES["greedy chat"])
        assert (text, reason) == reference["greedy chat"]
        assert raw.headers["x-piegpu-attempts"] == "2" and raw.headers["x-piegpu-replica"] != victim
        during = {}  # while Ray replaces the victim: every request avoids it, none fails
        for name in ("seeded chat", "greedy completion", "seeded completion"):
            text, reason, raw = ask(client, CASES[name])
            during[name] = (text, reason, raw.headers["x-piegpu-replica"], raw.headers["x-piegpu-attempts"],
                            time.time())
        out, err = watch.communicate(timeout=120)
    finally:
        guard.cancel()
        if watch.poll() is None:
            watch.kill()
    assert watch.returncode == 0 and out.strip(), err[-3000:]
    state = json.loads(out.strip().splitlines()[-1])
    # (a) Ray Serve marked the deployment unhealthy on the victim's failed health check, then replaced the victim
    assert any(status == "UNHEALTHY" and "health check failed" in message for _, status, message in state["seen"]), \
        f"Ray Serve never reported the failed health check: {state}"
    fresh = [n for n in state["names"] if n not in state["before"]]
    assert victim not in state["names"] and len(fresh) == 1 and state["states"].get("RUNNING") == 2, \
        f"the replica whose device was lost was not replaced within 90 s: {state}"
    assert state["seen"][-1][1] == "HEALTHY", state
    assert state["why"] and "the GPU device is lost" in state["why"][0], state  # check_health's DeviceLost
    # (b) none lost: the requests meanwhile were answered right, on the other replica, at the first try
    for name, (text, reason, replica, attempts, _) in during.items():
        assert (text, reason) == reference[name] and replica != victim and attempts == "1", (name, during[name])
    assert min(t for *_, t in during.values()) < state["replaced_at"], (during, state)  # some before the fresh one
    after = ray_server.stats()
    assert after["device_lost"] - before["device_lost"] == 1 and after["retried"] - before["retried"] == 1
    assert after["failed"] == before["failed"]
    # (c) the fresh replica serves: its engine answers /health through the ingress ...
    url = ray_server.url[:-3] + "/health"
    for _ in range(40):  # /health has no prefix to follow: the least-loaded replica, ties at random
        with urllib.request.urlopen(url, timeout=30) as r:
            if r.headers["x-piegpu-replica"] == fresh[0]:
                assert json.loads(r.read())["status"] == "ok"
                break
    else:
        pytest.fail(f"40 /health requests never reached the fresh replica {fresh[0]}")
    # ... and generates: with the other replica busy (a long stream the chat's affinity sends there), a prompt no
    # replica has seen goes to the least-loaded one
    other = (set(state["names"]) - set(fresh)).pop()
    busy = client.chat.completions.with_raw_response.create(model=MODEL_ID, max_tokens=400, temperature=0,
                                                           logit_bias=NO_EOS, stream=True,
                                                           messages=CASES["greedy chat"]["messages"])
    assert busy.headers["x-piegpu-replica"] == other
    stream = busy.parse()
    try:
        next(iter(stream))
        text, reason, raw = ask(client, REPLACEMENT_CASE)
    finally:
        stream.close()  # cancelled: the other replica stops generating it
    assert (text, reason) == reference["replacement"] and raw.headers["x-piegpu-replica"] == fresh[0]
    assert ask(client, CASES["greedy completion"])[:2] == reference["greedy completion"]
