"""Adapter and device selection (one shared device per process)."""

from __future__ import annotations

import os
import re
import threading
import weakref
from dataclasses import dataclass

from ..errors import DeviceError

WANTED_FEATURES = ("shader-f16", "subgroup", "timestamp-query", "mappable-primary-buffers",
                   "timestamp-query-inside-encoders", "timestamp-query-inside-passes", "shader-int64")
WANTED_LIMITS = ("max-storage-buffer-binding-size", "max-buffer-size", "max-storage-buffers-per-shader-stage",
                 "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup",
                 "max-compute-workgroup-size-x", "max-compute-workgroups-per-dimension", "max-bind-groups",
                 "max-bindings-per-bind-group", "max-dynamic-storage-buffers-per-pipeline-layout")
LIMIT_MODES = ("adapter", "webgpu")  # PIEGPU_LIMITS: the adapter's own limits (default), or WebGPU's defaults
WEBGPU_DEFAULT_LIMITS = {  # the WebGPU spec's defaults of the limits piegpu's layouts read
    "max-storage-buffer-binding-size": 128 << 20, "max-buffer-size": 256 << 20, "max-texture-dimension-2d": 8192,
    "max-uniform-buffer-binding-size": 64 << 10, "max-storage-buffers-per-shader-stage": 8,
    "max-compute-workgroup-storage-size": 16384, "max-compute-invocations-per-workgroup": 256,
    "max-compute-workgroup-size-x": 256, "max-compute-workgroups-per-dimension": 65535,
}


def _required_limits(adapter) -> dict:
    """The limits piegpu asks for: the adapter's (WANTED_LIMITS), or none raised with PIEGPU_LIMITS=webgpu -- the
    device then has WebGPU's defaults (a 128 MiB storage binding, 256 MiB buffers, 8192-texel textures), as a browser
    or a small iGPU gives, and piegpu lays models out within them."""
    mode = os.environ.get("PIEGPU_LIMITS", "adapter").strip().lower() or "adapter"
    if mode not in LIMIT_MODES:
        raise DeviceError(f"PIEGPU_LIMITS={os.environ['PIEGPU_LIMITS']!r}: expected one of {', '.join(LIMIT_MODES)}. "
                          "Fix: PIEGPU_LIMITS=webgpu for WebGPU's default limits, or unset it")
    if mode == "webgpu":
        return {k: min(v, adapter.limits.get(k, v)) for k, v in WEBGPU_DEFAULT_LIMITS.items()}
    return {k: adapter.limits[k] for k in WANTED_LIMITS if k in adapter.limits}


INSTALL_HINT = ("Fix: install a Vulkan driver -- on Debian/Ubuntu `apt-get install mesa-vulkan-drivers` gives "
                "lavapipe (llvmpipe, a CPU Vulkan); or pick another adapter with PIEGPU_ADAPTER=<name substring> "
                "or PIEGPU_BACKEND=vulkan|metal|dx12|gl. `piegpu info` lists what wgpu sees.")


@dataclass
class Device:
    """The wgpu adapter and device piegpu uses, with what was chosen and why."""

    adapter: object
    device: object
    name: str
    backend: str
    adapter_type: str
    features: tuple
    limits: dict
    lp_threads_default: bool  # True when piegpu set LP_NUM_THREADS itself

    @property
    def key(self) -> str:
        """Identifies the driver for the kernel cache."""
        import wgpu
        info = self.adapter.info
        return f"{info.get('vendor', '')}|{self.name}|{info.get('description', '')}|{self.backend}|wgpu{wgpu.__version__}"

    @property
    def is_cpu(self) -> bool:
        """True on CPU adapters such as lavapipe."""
        return self.adapter_type.lower() == "cpu" or "llvmpipe" in self.name.lower()

    @property
    def texture_weights(self) -> bool:
        """True where Q4_1 and Q8_0 weights go up as textures (model/gpu_weights.py): lavapipe.

        llvmpipe gathers a texel fetch for all lanes at once but loops over the lanes of a
        storage-buffer load; GPUs read storage buffers well and keep GGUF's layout.
        """
        return "llvmpipe" in self.name.lower()

    @property
    def wide_loads(self) -> bool:
        """True where the 8-lane kernels read K and V of halves through 64-bit words (shader-int64 on lavapipe).

        Mesa 22.3's llvmpipe turns a storage load into a loop over the lanes and the vector's components, so
        a vec4 of 64-bit words moves 32 bytes a lane in the loop a vec4<u32> needs for 16: the decode
        attention at context 2000 0.85x the time (model/kv_pages.py).
        """
        return bool(self.subgroup_lanes) and "shader-int64" in self.features

    @property
    def subgroup_lanes(self) -> int:
        """Lanes of lavapipe's subgroups when the subgroup feature is on and they are 8 or more, else 0.

        llvmpipe names its vector width ("llvmpipe (LLVM 15.0.6, 256 bits)"): a subgroup is that
        many 32-bit lanes. There the matmul, the attentions and the norm of few rows share loads
        through subgroup operations (model/kernels.py, model/shader_code.py); other adapters keep
        the plain forms.
        """
        m = re.search(r"llvmpipe.*?(\d+) bits", self.name)
        lanes = int(m.group(1)) // 32 if m else 0
        return lanes if "subgroup" in self.features and lanes >= 8 else 0


_device: Device | None = None
_lock = threading.Lock()


def _default_lp_threads() -> bool:
    # lavapipe keeps ~1 core busy by default; one worker per core ran up to 1.8x faster.
    if "LP_NUM_THREADS" in os.environ:
        return False
    os.environ["LP_NUM_THREADS"] = str(max(1, os.cpu_count() or 1))
    return True


_BACKENDS = {"vulkan": "Vulkan", "metal": "Metal", "dx12": "DX12", "gl": "GL", "opengl": "GL"}
# PIEGPU_BACKEND value -> the adapter's info["backend_type"], lowercased (wgpu says "OpenGL", "D3D12")
_BACKEND_TYPES = {"vulkan": "vulkan", "metal": "metal", "dx12": "d3d12", "gl": "opengl", "opengl": "opengl"}
LOST_HINT = ("Fix: the GPU device was lost (driver reset or crash, GPU removed or put to sleep, out of GPU "
             "memory, or device.destroy()); piegpu cannot use it again in this process -- restart the process "
             "(or load the model again in a new one)")


def lost_device_error(e: BaseException, doing: str) -> DeviceError | None:
    """A DeviceError explaining `e` if `e` says the device is lost, else None."""
    text = str(e).lower()
    if "device is lost" in text or "device lost" in text or "devicelost" in text:
        first = str(e).strip().splitlines()
        detail = " ".join(line.strip() for line in first if line.strip())[:300]
        return DeviceError(f"{doing} failed because the GPU device is lost ({detail}). {LOST_HINT}")
    return None


def _env_hint() -> str:
    """Environment variables that narrow what the Vulkan loader and wgpu can see, if set."""
    set_ = [f"{k}={os.environ[k]!r}" for k in ("VK_ICD_FILENAMES", "VK_DRIVER_FILES", "VK_LOADER_DRIVERS_SELECT",
                                                 "PIEGPU_BACKEND", "PIEGPU_ADAPTER", "WGPU_BACKEND_TYPE")
            if os.environ.get(k)]
    return f" (set in this environment: {', '.join(set_)}; check or unset them)" if set_ else ""
_instance_configured = False


def _configure_instance() -> None:
    """Limit wgpu to the primary backends unless PIEGPU_BACKEND asks for another.

    The OpenGL backend is slow for compute and probes EGL/Wayland noisily on
    headless machines; it is used only when asked for.
    """
    global _instance_configured
    if _instance_configured:
        return
    _instance_configured = True
    if not os.environ.get("XDG_RUNTIME_DIR"):
        # Mesa's Vulkan WSI probes Wayland and prints an error per probe on headless
        # boxes without this; a private empty dir keeps it quiet.
        import tempfile
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="piegpu-xdg-")
    want = os.environ.get("PIEGPU_BACKEND", "").lower()
    if want and want not in _BACKENDS:
        raise DeviceError(f"PIEGPU_BACKEND={want!r} is not one of {sorted(_BACKENDS)}. Fix: set one of those, "
                          "or unset PIEGPU_BACKEND to let piegpu choose")
    backends = [_BACKENDS[want]] if want else ["Vulkan", "Metal", "DX12"]
    try:
        from wgpu.backends.wgpu_native import extras
        extras.set_instance_extras(backends=backends)
    except Exception:  # an instance already exists (the host app made one): use what it sees
        pass


def describe_adapters() -> list:
    """Every adapter wgpu can see: (summary, info dict)."""
    import wgpu
    _configure_instance()
    return [(a.summary, dict(a.info)) for a in wgpu.gpu.enumerate_adapters_sync()]


def _choose(adapters: list):
    want_name = os.environ.get("PIEGPU_ADAPTER", "").lower()
    want_backend = os.environ.get("PIEGPU_BACKEND", "").lower()
    if want_name or want_backend:
        for a in adapters:
            info = a.info
            if want_name and want_name not in a.summary.lower():
                continue
            if want_backend and _BACKEND_TYPES.get(want_backend, want_backend) != str(info.get("backend_type", "")).lower():
                continue
            return a
        names = "; ".join(a.summary for a in adapters) or "none"
        raise DeviceError(f"no adapter matches PIEGPU_ADAPTER={want_name!r} PIEGPU_BACKEND={want_backend!r} "
                          f"(adapters: {names}){_env_hint()}. {INSTALL_HINT}")
    # Prefer a discrete GPU, then an integrated one, then a CPU Vulkan/Metal; OpenGL last.
    rank = {"discretegpu": 0, "integratedgpu": 1, "virtualgpu": 2, "cpu": 3}

    def score(a):
        info = a.info
        gl = str(info.get("backend_type", "")).lower() == "opengl"
        return (gl, rank.get(str(info.get("adapter_type", "")).lower().replace(" ", ""), 4))
    return min(adapters, key=score) if adapters else None


def get_device() -> Device:
    """The process-wide Device, created on first use."""
    global _device
    if _device is not None:
        return _device
    with _lock:
        if _device is not None:
            return _device
        lp_default = _default_lp_threads()
        try:
            import wgpu
        except ImportError as e:
            raise DeviceError(f"wgpu is not installed ({e}). Fix: pip install wgpu") from e
        _configure_instance()
        try:
            adapters = list(wgpu.gpu.enumerate_adapters_sync())
        except Exception as e:  # the native library failed to load or enumerate
            raise DeviceError(f"wgpu could not enumerate adapters: {e}{_env_hint()}. {INSTALL_HINT}") from e
        adapter = _choose(adapters)
        if adapter is None:
            raise DeviceError(f"no GPU adapter found{_env_hint()}. {INSTALL_HINT}")
        feats = tuple(f for f in WANTED_FEATURES if f in adapter.features)
        limits = _required_limits(adapter)
        try:
            dev = adapter.request_device_sync(required_features=list(feats), required_limits=limits)
        except Exception as e:
            raise DeviceError(f"could not create a device on {adapter.summary}: {e}{_env_hint()}. {INSTALL_HINT}") from e
        info = adapter.info
        granted = dict(dev.limits)
        if os.environ.get("PIEGPU_LIMITS", "").strip().lower() == "webgpu":  # piegpu keeps within them whatever wgpu grants
            granted.update({k: min(granted.get(k, v), v) for k, v in limits.items()})
        _device = Device(adapter, dev, str(info.get("device", adapter.summary)), str(info.get("backend_type", "")),
                         str(info.get("adapter_type", "")), feats, granted, lp_default)
        return _device


MODEL_CLOSED = ("this model was closed (model.close()) and its device buffers were released. "
                "Fix: load it again with piegpu.load_model(), or close it only when done with it")
_DEVICE_LOCKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_DEVICE_LOCKS_GUARD = threading.Lock()


def device_lock(device) -> threading.RLock:
    """The lock that serializes host-side device work on one wgpu device (shared by every model on it).

    Held only around synchronous sections -- preparing a pass, recording + submitting it
    together with the host mirror of its channels and working sets, rewinding -- never
    across an await, so generations in several threads (each on its own event loop)
    interleave pass by pass and the device queue sees whole passes in a consistent order.
    """
    with _DEVICE_LOCKS_GUARD:
        lock = _DEVICE_LOCKS.get(device)
        if lock is None:
            lock = _DEVICE_LOCKS[device] = threading.RLock()
        return lock
