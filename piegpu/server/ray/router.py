"""Prefix-affinity routing: a Ray Serve request router sending a prompt to the replica whose KV cache holds its prefix.

Each replica's engine keeps the KV pages of finished requests (server/prefix_cache.py), so a request whose
prompt starts like a recent one (the same system prompt, a chat's earlier turns) prefills only the new part
on the replica that served those. The router remembers the routing keys (server/ray/routed.py) it sent to
each replica and ranks the replica with the longest shared prefix first -- unless that replica has more
than `imbalance` requests in flight beyond the least-loaded one: then the least-loaded replica goes first
(a cold prefill beats waiting behind a skewed queue). Queue lengths are Ray Serve's own per-replica counts.
The ranking is one decision per request; Ray's router sends to the first rank that accepts
(max_ongoing_requests), then the next.

Both routers here (this one and AvoidingPowerOfTwoRouter, Ray's default with one change) leave out the
replicas a request's Routed.avoid names -- replicas whose device was lost, until Ray replaces them --
while any other replica is left: a replica that fails fast looks least loaded and would draw every request.
"""

from __future__ import annotations

import random
from collections import OrderedDict

from ray.serve._private.request_router import PowerOfTwoChoicesRequestRouter  # Ray Serve's default router
from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from .routed import Routed

IMBALANCE = 4  # requests in flight beyond the least-loaded replica that an affine replica may carry
MIN_MATCH = 32  # characters a prefix must share to count (shorter ones are the chat template's own start)
KEYS_PER_REPLICA = 256  # routing keys remembered per replica (most recent first out of memory)
KEY_CHARS = 8192  # characters of a key kept (longer prompts: the start is what a prefix cache reuses)


def shared_chars(a: str, b: str) -> int:
    """Length of the common prefix of two strings."""
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # binary search on slices: C-speed comparisons instead of a Python loop per character
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def routed_of(pending: PendingRequest | None) -> Routed | None:
    """The Routed a pending request carries (None when it carries none)."""
    if pending is None:
        return None
    for arg in list(pending.args) + list(pending.kwargs.values()):
        if isinstance(arg, Routed):
            return arg
    return None


def avoided(pending: PendingRequest | None) -> frozenset:
    """The replica ids (unique_id) a pending request's Routed asks to avoid."""
    routed = routed_of(pending)
    return frozenset(routed.avoid) if routed is not None else frozenset()


def without(replicas: list, avoid: frozenset) -> list:
    """`replicas` less the avoided ones -- all of them when every one is avoided (one to fail beats none)."""
    kept = [r for r in replicas if r.replica_id.unique_id not in avoid] if avoid else replicas
    return kept or replicas


class PrefixAffinityRouter(RequestRouter):
    """Longest remembered prefix first, least-loaded when the load is skewed (see the module docstring)."""

    def initialize_state(self, imbalance: int = IMBALANCE, min_match: int = MIN_MATCH,
                         keys_per_replica: int = KEYS_PER_REPLICA) -> None:
        """Ray Serve calls this with RequestRouterConfig.request_router_kwargs."""
        self.imbalance = int(imbalance)
        self.min_match = int(min_match)
        self.keys_per_replica = int(keys_per_replica)
        self._keys: dict = {}  # ReplicaID -> OrderedDict{key: None}, most recent last
        self.decisions = {"affinity": 0, "least_loaded": 0, "no_match": 0}

    # ---- what a request's prefix is, and where it went -----------------------------------------
    @staticmethod
    def key_of(pending: PendingRequest | None) -> str:
        """The routing key of a pending request ("" when it carries none)."""
        routed = routed_of(pending)
        return routed.key[:KEY_CHARS] if routed is not None else ""

    def best_match(self, key: str, replicas: list) -> tuple:
        """(the replica among `replicas` holding the longest prefix of key, its length in characters)."""
        best, best_n = None, 0
        for r in replicas:
            for old in reversed(self._keys.get(r.replica_id, ())):
                n = shared_chars(old, key)
                if n > best_n:
                    best, best_n = r, n
                if n == len(key):
                    break
        return best, best_n

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result) -> None:
        """Remember the key on the replica that took the request."""
        key = self.key_of(pending_request)
        if not key:
            return
        keys = self._keys.setdefault(replica_id, OrderedDict())
        keys.pop(key, None)
        keys[key] = None
        while len(keys) > self.keys_per_replica:
            keys.popitem(last=False)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        """A dead replica's cache died with it."""
        super().on_replica_actor_died(replica_id)
        self._keys.pop(replica_id, None)

    def update_replicas(self, replicas: list) -> None:
        """Forget the keys of replicas that left the deployment."""
        super().update_replicas(replicas)
        for rid in [r for r in self._keys if r not in self._replica_id_set]:
            del self._keys[rid]

    # ---- the decision ---------------------------------------------------------------------------
    async def loads(self, replicas: list) -> dict:
        """Requests in flight per replica id: Ray's cached counts, probing replicas the cache lacks."""
        out, missing = {}, []
        for r in replicas:  # without Ray's live cache (strict max_ongoing_requests off), probe every time
            q = self._replica_queue_len_cache.get(r.replica_id) if self._use_replica_queue_len_cache else None
            if q is None:
                missing.append(r)
            else:
                out[r.replica_id] = q
        if missing:
            for r, q in await self._probe_queue_lens(missing, 0):
                if q is not None:
                    out[r.replica_id] = q
        return out

    async def choose_replicas(self, candidate_replicas: list,
                              pending_request: PendingRequest | None = None) -> list:
        """Ranks of replicas: the affine one first when the load allows it, then the rest by load."""
        if pending_request is not None:
            pending_request.routing_context.should_backoff = True  # every replica is offered in each round
        candidate_replicas = without(candidate_replicas, avoided(pending_request))
        if not candidate_replicas:
            return []
        loads = await self.loads(candidate_replicas)
        shuffled = random.sample(candidate_replicas, len(candidate_replicas))  # ties broken at random
        by_load = sorted(shuffled, key=lambda r: loads.get(r.replica_id, 1 << 30))
        key = self.key_of(pending_request)
        best, n = self.best_match(key, candidate_replicas) if key else (None, 0)
        if best is None or n < min(self.min_match, len(key)):
            self.decisions["no_match"] += 1
            return [[r] for r in by_load]
        lightest = loads.get(by_load[0].replica_id, 0)
        if loads.get(best.replica_id, 1 << 30) - lightest > self.imbalance:
            self.decisions["least_loaded"] += 1
            return [[r] for r in by_load]
        self.decisions["affinity"] += 1
        return [[best]] + [[r] for r in by_load if r is not best]


class AvoidingPowerOfTwoRouter(PowerOfTwoChoicesRequestRouter):
    """Ray Serve's default router (power of two choices, load only) leaving out the replicas a request avoids."""

    async def choose_replicas(self, candidate_replicas: list,
                              pending_request: PendingRequest | None = None) -> list:
        """Ray's two random choices less the avoided replicas; if Ray drew only avoided ones, two of the others
        at random (Ray sends to the less loaded of them)."""
        ranks = await super().choose_replicas(candidate_replicas, pending_request)
        avoid = avoided(pending_request)
        if not avoid:
            return ranks
        kept = [rank for rank in ([r for r in rank if r.replica_id.unique_id not in avoid] for rank in ranks) if rank]
        if kept:
            return kept
        others = [r for r in candidate_replicas if r.replica_id.unique_id not in avoid]
        return [random.sample(others, min(2, len(others)))] if others else ranks


def router_config(affinity: bool = True, imbalance: int = IMBALANCE) -> dict:
    """The deployment's request_router_config: prefix affinity, or Ray Serve's default power of two choices
    (both leaving out the replicas a request avoids)."""
    from ray.serve.config import RequestRouterConfig
    if not affinity:
        return RequestRouterConfig(request_router_class=f"{__name__}:AvoidingPowerOfTwoRouter")
    return RequestRouterConfig(request_router_class=f"{__name__}:PrefixAffinityRouter",
                               request_router_kwargs={"imbalance": imbalance})


__all__ = ["PrefixAffinityRouter", "AvoidingPowerOfTwoRouter", "RunningReplica", "router_config", "shared_chars",
           "routed_of", "avoided", "without", "IMBALANCE"]
