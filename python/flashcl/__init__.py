"""flashcl: fused FlashAttention-style attention in OpenCL, from Python.

A thin ctypes layer over libflashcl's public C API (include/flashcl.h)::

    import numpy as np, flashcl
    q = np.random.randn(1, 128, 8, 64).astype(np.float32)  # [batch, seq, heads, dim]
    o = flashcl.attention(q, q, q, causal=True)

NumPy arrays go through the library's host call; ``pyopencl.array.Array``
inputs go through its device call with no copies. See
:func:`attention`, :func:`attention_kvcache` (decoding against a KV
cache, dense or paged, with in-place append and split KV),
:func:`attention_varlen` (packed variable-length batches),
:func:`combine_partials` (merging results over disjoint key ranges by
their LSEs), :func:`attention_backward` (the gradients), FlashAttention-2's
names (:func:`flash_attn_func`, :func:`flash_attn_varlen_func`,
:func:`flash_attn_with_kvcache`),
:func:`devices`, docs/python.md and the README's Python section.
"""
from . import _lib
from ._attention import attention
from ._backward import attention_backward
from ._inference import (attention_kvcache, attention_varlen,
                         attention_varlen_backward)
from ._combine import combine_partials
from ._kv_quant import dequantize_kv, quantize_kv
from ._flash_attn import (flash_attn_func, flash_attn_varlen_func,
                          flash_attn_with_kvcache)
from ._devices import Device, devices
from ._errors import (ERROR_CLASSES, AliasingError, BackendError,
                      BuildFailedError, ContextMismatchError,
                      DeviceNotFoundError, DtypeUnsupportedError, Error,
                      HeadDimUnsupportedError, HeadGroupingError,
                      InvalidDimensionError, InvalidLayoutError,
                      InvalidValueError, NoOpenCLError, NullArgumentError,
                      OpenCLError, OutOfBoundsError, OutOfMemoryError, Status,
                      UnsupportedError)

__version__ = "0.3.0"

#: The libflashcl file in use and how it was found ("FLASHCL_LIBRARY",
#: "bundled", "in-tree build-...", "system").
library_path = _lib.library_path
library_source = _lib.library_source


def library_version() -> str:
    """The loaded libflashcl's version (flashcl_version_string)."""
    return _lib.decode(_lib.version_string())


__all__ = [
    "attention", "attention_backward", "attention_kvcache", "attention_varlen",
    "attention_varlen_backward",
    "combine_partials", "quantize_kv", "dequantize_kv",
    "flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
    "devices", "Device", "Status", "Error", "library_path", "library_source",
    "library_version",
] + [cls.__name__ for cls in ERROR_CLASSES]
