"""The prefix-affinity router's decision and the ingress's request envelope, without a Ray cluster.

The router is Ray Serve's own RequestRouter subclass, constructed as Ray constructs it; only the queue
lengths (what Ray's probes would return) are given, so the rule itself is what is tested: the replica
with the longest remembered prefix first, unless it carries more than `imbalance` requests beyond the
least-loaded replica -- and both routers' leaving out the replicas a request avoids (their device was lost).
"""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("ray.serve", reason="Ray Serve is not installed. Fix: pip install 'piegpu[ray]'")

from ray.serve._private.common import DeploymentHandleSource, DeploymentID, ReplicaID  # noqa: E402
from ray.serve.request_router import PendingRequest  # noqa: E402

from piegpu.server.ray.routed import Routed, pin_seed, routed_request, routing_key  # noqa: E402
from piegpu.server.ray.router import AvoidingPowerOfTwoRouter, PrefixAffinityRouter, shared_chars  # noqa: E402

DEP = DeploymentID(name="PiegpuReplica", app_name="piegpu")


class Replica:
    """What the router reads of a running replica: its id and its request limit."""

    def __init__(self, name: str):
        self.replica_id = ReplicaID(name, DEP)
        self.max_ongoing_requests = 64


class Router(PrefixAffinityRouter):
    """The router with the queue lengths Ray's probes would report set by the test."""

    queue: dict = {}

    async def loads(self, replicas: list) -> dict:
        return {r.replica_id: self.queue[r.replica_id.unique_id] for r in replicas}


def pending(key: str, avoid: tuple = ()) -> PendingRequest:
    """A pending request carrying a Routed with this routing key (and replicas to avoid)."""
    from ray.serve._private.common import RequestMetadata
    return PendingRequest(args=[Routed("POST", "/v1/chat/completions", key=key, avoid=avoid)], kwargs={},
                          metadata=RequestMetadata(request_id="r", internal_request_id="r"))


def decide(router, replicas, key: str, avoid: tuple = ()) -> str:
    """The replica ranked first for a request with this key."""
    ranks = asyncio.get_event_loop().run_until_complete(router.choose_replicas(replicas, pending(key, avoid)))
    return ranks[0][0].replica_id.unique_id


@pytest.fixture
def setup():
    """A router on an event loop of the test's own (Ray binds the router and its requests to one loop)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)

    async def make():
        return Router(DEP, DeploymentHandleSource.UNKNOWN)
    router = loop.run_until_complete(make())
    router.initialize_state(imbalance=4)
    router.queue = {"a": 0, "b": 0}
    yield router, [Replica("a"), Replica("b")]
    asyncio.set_event_loop(None)
    loop.close()


def test_a_shared_prefix_goes_to_the_replica_that_served_it(setup):
    router, (a, b) = setup
    system = "\x1esystem\x1fYou are an expert on lighthouses and answer in one line."
    router.on_request_routed(pending(system + "\x1euser\x1fWhy are they tall?"), b.replica_id, None)
    router.queue = {"a": 0, "b": 3}  # b busier, but within the threshold of 4
    assert decide(router, [a, b], system + "\x1euser\x1fWhy are they tall?\x1eassistant\x1fTo be seen.") == "b"
    assert router.decisions["affinity"] == 1


def test_skewed_load_falls_back_to_the_least_loaded_replica(setup):
    router, (a, b) = setup
    key = "\x1esystem\x1fYou are an expert on glaciers and answer in one line.\x1euser\x1fHow fast do they move?"
    router.on_request_routed(pending(key), b.replica_id, None)
    router.queue = {"a": 1, "b": 6}  # 5 more than a: over the threshold
    assert decide(router, [a, b], key) == "a"
    assert router.decisions["least_loaded"] == 1


def test_no_shared_prefix_goes_to_the_least_loaded_replica(setup):
    router, (a, b) = setup
    router.on_request_routed(pending("\x1euser\x1fA question about volcanoes, asked at length."), a.replica_id, None)
    router.queue = {"a": 2, "b": 1}
    assert decide(router, [a, b], "\x1euser\x1fSomething else entirely, about the history of chess.") == "b"
    assert router.decisions["no_match"] == 1


def test_a_dead_replicas_prefixes_are_forgotten(setup):
    router, (a, b) = setup
    key = "\x1euser\x1fTell me about coral reefs and the fish that live in them."
    router.on_request_routed(pending(key), b.replica_id, None)
    router.on_replica_actor_died(b.replica_id)
    assert router.best_match(key, [a, b]) == (None, 0)


def test_a_replica_whose_device_was_lost_is_avoided_while_another_is_left(setup):
    router, (a, b) = setup
    key = "\x1esystem\x1fYou are an expert on tides and answer in one line.\x1euser\x1fWhy twice a day?"
    router.on_request_routed(pending(key), b.replica_id, None)
    assert decide(router, [a, b], key) == "b"  # affinity ...
    assert decide(router, [a, b], key, avoid=("b",)) == "a"  # ... unless b's device was lost
    assert decide(router, [a, b], key, avoid=("a", "b")) == "b"  # none left to avoid them with: as before


def test_rays_default_router_leaves_out_avoided_replicas(setup, monkeypatch):
    _, (a, b) = setup
    from ray.serve._private.request_router import PowerOfTwoChoicesRequestRouter

    async def make():
        return AvoidingPowerOfTwoRouter(deployment_id=DEP, handle_source=DeploymentHandleSource.UNKNOWN)
    router = asyncio.get_event_loop().run_until_complete(make())

    def ranks(picked: list, avoid: tuple) -> list:
        async def two_choices(self, candidates, pending_request=None):  # what Ray's two random choices gave
            return [picked]
        monkeypatch.setattr(PowerOfTwoChoicesRequestRouter, "choose_replicas", two_choices)
        out = asyncio.get_event_loop().run_until_complete(router.choose_replicas([a, b], pending("k", avoid)))
        return [[r.replica_id.unique_id for r in rank] for rank in out]
    assert ranks([a, b], ()) == [["a", "b"]]
    assert ranks([a, b], ("b",)) == [["a"]]
    assert ranks([b], ("b",)) == [["a"]]  # Ray drew only the avoided one: the others instead
    assert ranks([b], ("a", "b")) == [["b"]]  # every replica avoided: Ray's choice stands


def test_device_lost_names_its_replica_through_rays_error_wrapping():
    import pickle

    from ray.exceptions import RayTaskError

    from piegpu.server.ray.ingress import _lost_replica, _replica_died
    from piegpu.server.ray.replica import DeviceLost
    e = pickle.loads(pickle.dumps(DeviceLost("piegpu replica r1 cannot serve this request", "r1")))
    assert e.replica == "r1" and str(e) == "piegpu replica r1 cannot serve this request"
    wrapped = RayTaskError("http", "traceback", e).as_instanceof_cause()  # as the ingress receives it
    assert isinstance(wrapped, DeviceLost) and _replica_died(wrapped) and _lost_replica(wrapped) == "r1"
    assert not _replica_died(ValueError("a bad request")) and _lost_replica(ValueError("x")) == ""


def test_shared_chars():
    assert shared_chars("abcdef", "abcxyz") == 3
    assert shared_chars("", "abc") == 0 and shared_chars("same", "same") == 4


def test_routing_key_and_seed_pinning():
    chat = {"model": "m", "messages": [{"role": "system", "content": "S"},
                                       {"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert routing_key("/v1/chat/completions", chat) == "\x1esystem\x1fS\x1euser\x1fhi"
    assert routing_key("/v1/completions", {"prompt": ["first", "second"]}) == "first"
    assert routing_key("/health", None) == ""
    body = dict(chat)
    assert pin_seed("/v1/chat/completions", body) and 0 <= body["seed"] < 1 << 31
    assert not pin_seed("/v1/chat/completions", {"seed": 5}) and not pin_seed("/tokenize", {})
    assert pin_seed("/completion", {"seed": -1})  # llama.cpp's "random seed" is pinned too
    r = routed_request("POST", "/v1/chat/completions", b"", [("Host", "x"), ("Content-Type", "application/json")],
                       json.dumps({**chat, "stream": True}).encode())
    assert r.stream and r.headers == [("content-type", "application/json")] and json.loads(r.body)["seed"] >= 0
    bad = routed_request("POST", "/v1/chat/completions", b"", [], b"{not json")
    assert bad.body == b"{not json" and bad.key == ""  # the replica's app answers the 400
