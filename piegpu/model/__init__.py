"""The model: config, checkpoints, GGUF files read in place (gguf_file.py, gguf_arch.py, gguf_model.py;
gguf_convert.py exports one as an HF directory), tokenizers (gguf_tokenizer.py), chat templates,
the default model, numpy reference (host side),
and the model on the device: weights in GPU layouts (weights.py, gpu_weights.py), the forward pass
in named steps (forward.py) over typed shader wrappers (kernels.py), working sets, and load_model.

Importing this package does not import wgpu; gpu_model.py and piegpu.textgen do.
"""

from .checkpoint import expected_shapes, load_checkpoint, save_checkpoint
from .config import SUPPORTED_ARCHITECTURES, LlamaConfig
from .default import INSTALL_COMMAND, default_gguf_path, default_model_dir
from .gguf_convert import RawTensor, convert_gguf, read_gguf_raw
from .reference import KVCache, ReferenceModel
from .tokenizer import chat_prompt, load_chat_template, load_tokenizer

__all__ = [
    "LlamaConfig",
    "SUPPORTED_ARCHITECTURES",
    "expected_shapes",
    "load_checkpoint",
    "save_checkpoint",
    "convert_gguf",
    "read_gguf_raw",
    "RawTensor",
    "default_gguf_path",
    "default_model_dir",
    "INSTALL_COMMAND",
    "load_tokenizer",
    "load_chat_template",
    "chat_prompt",
    "ReferenceModel",
    "KVCache",
]
