"""LoRA adapters in the server: which adapter a request runs under, and the routes that list and change them.

OpenAI requests pick an adapter by `model` (vLLM's convention: each adapter's name is a model id of /v1/models,
its parent the base model). llama.cpp's /completion takes `lora: [{"id": i, "scale": s}]` (ids as GET
/lora-adapters lists them; one adapter with a nonzero scale a request: piegpu runs one adapter per row); a
request without it runs under the scales POST /lora-adapters set, which start at 0 (llama.cpp's
--lora-init-without-apply: an adapter applies to the requests that ask for it). vLLM's POST /v1/load_lora_adapter
and /v1/unload_lora_adapter change the set while the server runs; the engine's prefix cache keeps each adapter's
KV apart (server/prefix_cache.py).
"""

from __future__ import annotations

import math
import threading

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ..errors import PieGpuError
from .protocol import ServerError


class LoraServing:
    """The served model's adapters with llama.cpp's ids and global scales."""

    def __init__(self, model, model_id: str):
        self.model, self.model_id = model, model_id
        self.ids: list = [a.name for a in getattr(model, "adapters", [])]  # llama.cpp's id -> name (None: unloaded)
        self.scales: dict = {}  # name -> global scale (POST /lora-adapters)
        self.lock = threading.Lock()

    def served(self) -> list:
        """The model ids this server answers to: the base model, then its adapters."""
        return [self.model_id] + [n for n in self.ids if n is not None]

    def check(self, name: str) -> None:
        """404 listing the served ids for a name that is neither the base model nor a loaded adapter."""
        if name not in self.served():
            raise ServerError(404, f"The model `{name}` does not exist. This server serves: "
                                   f"{', '.join(f'`{n}`' for n in self.served())}.", "model", "model_not_found")

    def for_request(self, req):
        """The LoraUse a request runs under (None: the base model)."""
        lora = getattr(req, "lora", None)
        if lora is not None:
            return self._from_list([(x.id, x.scale) for x in lora], "lora")
        name = getattr(req, "model", None)
        if name is not None and name != self.model_id:
            self.check(name)
            return self.model._adapters.use(name, 1.0)
        if not hasattr(req, "n_predict"):  # an OpenAI request for the base model
            return None
        with self.lock:  # a llama.cpp request naming no adapter: the scales POST /lora-adapters set
            active = [(self.ids.index(n), s) for n, s in self.scales.items() if s]
        return self._from_list(active, "POST /lora-adapters") if active else None

    def _from_list(self, pairs: list, where: str):
        live = {i: n for i, n in enumerate(self.ids) if n is not None}
        for i, s in pairs:
            if i not in live:
                raise ServerError(400, f"{where}: no LoRA adapter has id {i}; loaded: "
                                       f"{', '.join(f'{k} ({n})' for k, n in live.items()) or 'none'}", "lora")
            if not math.isfinite(s):
                raise ServerError(400, f"{where}: adapter {i}'s scale {s} is not a finite number", "lora")
        used = [(i, s) for i, s in pairs if s != 0]
        if len(used) > 1:
            raise ServerError(400, f"{where}: {len(used)} adapters with nonzero scales; piegpu runs one adapter per "
                                   "request. Fix: a nonzero scale for one of them", "lora")
        return self.model._adapters.use(live[used[0][0]], float(used[0][1])) if used else None

    def memory(self) -> dict:
        """GET /health's "lora": adapters loaded and resident, the bank's slots and device bytes, host bytes."""
        bank = self.model.gpu.lora
        loaded = self.model.adapters
        return {"loaded": len(loaded), "host_bytes": sum(a.nbytes for a in loaded),
                "resident": 0 if bank is None else len(bank.resident), "slots": 0 if bank is None else bank.slots,
                "max_slots": None if bank is None else bank.max_slots, "device_bytes": 0 if bank is None else bank.bytes}

    # ---- routes ---------------------------------------------------------------------------------
    def listing(self) -> list:
        """GET /lora-adapters: [{id, path, scale, ...}] as llama.cpp answers, with piegpu's facts."""
        out = []
        for i, name in enumerate(self.ids):
            if name is None:
                continue
            a = self.model._adapters.loaded[name]
            out.append({"id": i, "name": name, "path": a.path, "scale": self.scales.get(name, 0.0), "rank": a.rank,
                        "targets": a.targets, "host_bytes": a.nbytes})
        return out

    def set_scales(self, body) -> list:
        """POST /lora-adapters: [{"id": i, "scale": s}] sets the scales of requests that name no adapter."""
        if not isinstance(body, list) or not all(isinstance(x, dict) and isinstance(x.get("id"), int) and
                                                 isinstance(x.get("scale", 1.0), (int, float)) for x in body):
            raise ServerError(400, 'POST /lora-adapters takes a list of {"id": int, "scale": number}', "lora")
        self._from_list([(x["id"], float(x.get("scale", 1.0))) for x in body], "POST /lora-adapters")
        with self.lock:
            for x in body:
                self.scales[self.ids[x["id"]]] = float(x.get("scale", 1.0))
        return self.listing()

    def load(self, body: dict) -> str:
        """POST /v1/load_lora_adapter {lora_name, lora_path} (vLLM)."""
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not name or not isinstance(path, str) or not path:
            raise ServerError(400, "load_lora_adapter takes {\"lora_name\": str, \"lora_path\": str}", "lora_name")
        if name == self.model_id:
            raise ServerError(400, f"`{name}` is the base model's id; pick another lora_name", "lora_name")
        try:
            self.model.load_adapter(path, name=name)
        except PieGpuError as e:
            raise ServerError(400, str(e), "lora_path") from None
        with self.lock:
            self.ids.append(name)
        return f"Success: LoRA adapter '{name}' added successfully."

    def unload(self, body: dict) -> str:
        """POST /v1/unload_lora_adapter {lora_name} (vLLM); refused while a request runs under it."""
        name = body.get("lora_name")
        if name not in self.ids:
            raise ServerError(404, f"no LoRA adapter named `{name}` is loaded; loaded: "
                                   f"{', '.join(n for n in self.ids if n) or 'none'}", "lora_name")
        try:
            self.model.unload_adapter(name)
        except PieGpuError as e:
            raise ServerError(409, str(e), "lora_name") from None
        with self.lock:
            self.ids[self.ids.index(name)] = None
            self.scales.pop(name, None)
        return f"Success: LoRA adapter '{name}' removed successfully."


def register_lora(app: FastAPI, lora: LoraServing, check_key) -> None:
    """Add GET/POST /lora-adapters (llama.cpp) and POST /v1/load_lora_adapter, /v1/unload_lora_adapter (vLLM)."""
    async def body_of(request: Request):
        check_key(request)
        try:
            return await request.json()
        except ValueError:
            raise ServerError(400, "the body is not JSON") from None

    @app.get("/lora-adapters", tags=["llama.cpp"])
    async def lora_adapters(request: Request):
        check_key(request)
        return JSONResponse(lora.listing())

    @app.post("/lora-adapters", tags=["llama.cpp"])
    async def set_lora_adapters(request: Request):
        return JSONResponse(lora.set_scales(await body_of(request)))

    @app.post("/v1/load_lora_adapter", tags=["LoRA"])
    async def load_lora_adapter(request: Request):
        body = await body_of(request)
        return JSONResponse(lora.load(body if isinstance(body, dict) else {}))

    @app.post("/v1/unload_lora_adapter", tags=["LoRA"])
    async def unload_lora_adapter(request: Request):
        body = await body_of(request)
        return JSONResponse(lora.unload(body if isinstance(body, dict) else {}))
