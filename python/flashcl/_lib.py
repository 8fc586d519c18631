"""Loading libflashcl and its ctypes mirror of include/flashcl.h.

Only the public header's API is used. The structs below mirror the header
field by field (tests/test_abi.py compiles a C program against the header
and compares every offset and size). The library is found, first that
exists:

1. ``FLASHCL_LIBRARY``: a path to ``libflashcl.so*`` or to the folder that
   holds it (if set, it must load: no silent fallback);
2. the copy bundled into this package at build time (``flashcl/_lib/``);
3. an in-tree build when the package is imported from the repository's
   ``python/`` folder: ``build-release``, ``build-test``, ``build-py``,
   ``build``, then any other ``build-*`` folder, newest first (sanitizer
   builds skipped: their runtime cannot be loaded into python);
4. the system loader (the SONAME ``libflashcl.so.0.MINOR``;
   ``LD_LIBRARY_PATH``, ldconfig).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_float, c_int,
                    c_int64, c_size_t, c_uint, c_uint64, c_void_p)
from pathlib import Path

#: The header version this module mirrors; an older library (no
#: struct_size) is refused, a newer 0.x accepts our smaller descriptor.
HEADER_VERSION = (0, 3, 0)

_HERE = Path(__file__).resolve().parent
#: The SONAME of the library built from that header (README's ABI policy:
#: libflashcl.so.0.MINOR before 1.0), the name the system loader knows.
_SONAME = "libflashcl.so.%d.%d" % HEADER_VERSION[:2]
_LIB_NAMES = ("libflashcl.so", _SONAME, "libflashcl.dylib")


# ---- structs (include/flashcl.h) --------------------------------------

class Tensor(Structure):
    """flashcl_tensor"""
    _fields_ = [
        ("buffer", c_void_p),      # cl_mem
        ("offset", c_size_t),      # bytes
        ("stride_batch", c_size_t),  # elements
        ("stride_head", c_size_t),
        ("stride_seq", c_size_t),
        ("stride_dim", c_size_t),
    ]


class AttentionDesc(Structure):
    """flashcl_attention_desc (struct_size first since 0.2; q_position,
    k_position and the quantized KV cache's fields since 0.3)"""
    _fields_ = [
        ("struct_size", c_size_t),
        ("batch", c_int64),
        ("heads_q", c_int64),
        ("heads_kv", c_int64),
        ("seqlen_q", c_int64),
        ("seqlen_k", c_int64),
        ("head_dim", c_int64),
        ("dtype", c_int),
        ("layout", c_int),
        ("scale", c_float),
        ("causal", c_int),
        ("causal_align", c_int),
        ("backend", c_int),
        ("q", Tensor),
        ("k", Tensor),
        ("v", Tensor),
        ("o", Tensor),
        ("lse", Tensor),
        ("window", c_int),
        ("window_left", c_int64),
        ("window_right", c_int64),
        ("alibi_slopes", Tensor),
        ("bias", Tensor),
        ("bias_dtype", c_int),
        ("mask", Tensor),
        ("softcap", c_float),
        ("sinks", Tensor),
        ("head_dim_v", c_int64),
        ("explicit_scale", c_int),
        ("allow_tf32", c_int),
        # inference (issue 11): set by _inference.py (all zero: off)
        ("num_splits", c_int),
        ("cache_seqlens", Tensor),
        ("cache_batch_idx", Tensor),
        ("kv_batch", c_int64),
        ("k_new", Tensor),
        ("v_new", Tensor),
        ("seqlen_new", c_int64),
        ("cu_seqlens_q", Tensor),
        ("cu_seqlens_k", Tensor),
        ("max_seqlen_q", c_int64),
        ("max_seqlen_k", c_int64),
        ("block_table", Tensor),
        ("page_size", c_int64),
        ("max_pages", c_int64),
        ("infer_status", Tensor),
        ("q_position", c_int64),
        ("k_position", c_int64),
        # quantized KV cache (issue 45; docs/kv-quantization.md): not yet
        # set by the Python calls (zero: K and V in the dtype)
        ("k_storage", c_int),
        ("v_storage", c_int),
        ("k_scale_per_head", c_int),
        ("v_scale_per_head", c_int),
        ("k_scale", Tensor),
        ("v_scale", Tensor),
        ("k_zero", Tensor),
        ("v_zero", Tensor),
        # the LSE's storage (fp32; fp64 for fp64 calls): set by attention()
        # for a float64 call on the fused backend (its lse float64)
        ("lse_dtype", c_int),
    ]


class BackwardDesc(Structure):
    """flashcl_backward_desc (0.3)"""
    _fields_ = [
        ("struct_size", c_size_t),
        ("d_o", Tensor),
        ("d_q", Tensor),
        ("d_k", Tensor),
        ("d_v", Tensor),
        ("d_sinks", Tensor),
        ("nondeterministic", c_int),
    ]


class CombineDesc(Structure):
    """flashcl_combine_desc"""
    _fields_ = [
        ("struct_size", c_size_t),
        ("num_partials", c_int64),
        ("batch", c_int64),
        ("heads", c_int64),
        ("seqlen_q", c_int64),
        ("head_dim_v", c_int64),
        ("dtype", c_int),
        ("layout", c_int),
        ("o_partial", Tensor),
        ("o_partial_stride", c_size_t),
        ("lse_partial", Tensor),
        ("lse_partial_stride", c_size_t),
        ("o", Tensor),
        ("lse", Tensor),
        ("partial_dtype", c_int),
        ("lse_dtype", c_int),
    ]


class DeviceInfo(Structure):
    """flashcl_device_info (EXPERIMENTAL section of the header)"""
    _fields_ = [
        ("name", c_char * 256),
        ("vendor", c_char * 256),
        ("platform", c_char * 256),
        ("driver_version", c_char * 128),
        ("opencl_c_version", c_char * 128),
        ("vendor_id", c_uint),
        ("is_cpu", c_int),
        ("is_gpu", c_int),
        ("compute_units", c_uint),
        ("clock_mhz", c_uint),
        ("global_mem_bytes", c_uint64),
        ("local_mem_bytes", c_uint64),
        ("max_alloc_bytes", c_uint64),
        ("max_work_group_size", c_size_t),
        ("has_fp64", c_int),
        ("has_fp16_ext", c_int),
        ("fp16_storage", c_int),
        ("bf16_storage", c_int),
        ("has_subgroups", c_int),
        ("nv_compute_capability", c_uint),
        ("amd_gfx", c_char * 64),
        ("matrix_path", c_char * 160),
        ("flashcl_path", c_char * 160),
        ("tuning_vendor", c_char * 32),
        ("tuning_arch", c_char * 32),
        ("tuning_device", c_char * 128),
    ]


# enum values (include/flashcl.h)
DTYPE_FP32, DTYPE_FP16, DTYPE_BF16, DTYPE_FP64 = 0, 1, 2, 3
LAYOUT_BNHD, LAYOUT_BHND = 0, 1
CAUSAL_BOTTOM_RIGHT, CAUSAL_TOP_LEFT, CAUSAL_ABSOLUTE = 0, 1, 2
BACKEND_AUTO, BACKEND_FUSED, BACKEND_REFERENCE = 0, 1, 2
KV_SAME, KV_FP8_E4M3, KV_FP8_E5M2, KV_INT8, KV_INT4 = 0, 1, 2, 3, 4
# AttentionDesc.infer_status: int32 [INFER_STATUS_COUNT] counters
(INFER_STATUS_APPENDS_DROPPED, INFER_STATUS_PAGES_SKIPPED,
 INFER_STATUS_LENGTHS_CLAMPED, INFER_STATUS_ROWS_SKIPPED,
 INFER_STATUS_COUNT) = 0, 1, 2, 3, 4
MAX_SCALE = 1e30
MIN_SOFTCAP = 1e-30


# ---- finding the library -----------------------------------------------

def _in_tree_dirs():
    repo = _HERE.parent.parent
    if not (repo / "include" / "flashcl.h").is_file():
        return []
    first = ["build-release", "build-test", "build-py", "build"]
    dirs = [repo / name for name in first]
    others = [d for d in repo.glob("build-*")
              if d.is_dir() and d.name not in first and "san" not in d.name]
    others.sort(key=lambda d: d.stat().st_mtime, reverse=True)
    return dirs + others


def _lib_in(folder: Path):
    for name in _LIB_NAMES:
        path = folder / name
        if path.is_file():
            return path
    return None


def _load():
    env = os.environ.get("FLASHCL_LIBRARY")
    if env:
        path = Path(env)
        if path.is_dir():
            found = _lib_in(path)
            if found is None:
                raise ImportError(
                    f"FLASHCL_LIBRARY={env} is a folder without libflashcl.so")
            path = found
        try:
            return ctypes.CDLL(str(path)), str(path), "FLASHCL_LIBRARY"
        except OSError as e:
            raise ImportError(f"FLASHCL_LIBRARY={env}: cannot load: {e}") from e
    tried = []
    bundled = _lib_in(_HERE / "_lib")
    candidates = [(bundled, "bundled")] if bundled else []
    candidates += [(_lib_in(d), f"in-tree {d.name}") for d in _in_tree_dirs()]
    for path, source in candidates:
        if path is None:
            continue
        try:
            return ctypes.CDLL(str(path)), str(path), source
        except OSError as e:
            tried.append(f"{path}: {e}")
    for name in (_SONAME, ctypes.util.find_library("flashcl")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            return lib, _loaded_path(lib, name), "system"
        except OSError as e:
            tried.append(f"{name}: {e}")
    raise ImportError(
        "libflashcl not found. Set FLASHCL_LIBRARY to libflashcl.so, install "
        "the package with its bundled copy (pip install ./python), or put "
        "the library on the loader's path. Tried: "
        + ("; ".join(tried) or "bundled copy, in-tree builds, system loader"))


def _loaded_path(lib, fallback):
    """The file the loader picked (dladdr on a symbol), else `fallback`."""
    try:
        class DlInfo(Structure):
            _fields_ = [("dli_fname", c_char_p), ("dli_fbase", c_void_p),
                        ("dli_sname", c_char_p), ("dli_saddr", c_void_p)]
        libdl = ctypes.CDLL(None)
        info = DlInfo()
        addr = ctypes.cast(lib.flashcl_version_number, c_void_p)
        if libdl.dladdr(addr, ctypes.byref(info)) and info.dli_fname:
            return os.path.realpath(info.dli_fname.decode())
    except (OSError, AttributeError):
        pass
    return fallback


lib, library_path, library_source = _load()


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


version_number = _fn("flashcl_version_number", c_uint)
version_string = _fn("flashcl_version_string", c_char_p)
status_string = _fn("flashcl_status_string", c_char_p, c_int)
context_create = _fn("flashcl_context_create", c_int, POINTER(c_void_p),
                     c_char_p)
context_create_from_queue = _fn("flashcl_context_create_from_queue", c_int,
                                POINTER(c_void_p), c_void_p)
context_release = _fn("flashcl_context_release", None, c_void_p)
context_last_error = _fn("flashcl_context_last_error", c_char_p, c_void_p)
last_create_error = _fn("flashcl_last_create_error", c_char_p)
context_queue = _fn("flashcl_context_queue", c_void_p, c_void_p)
context_cl_context = _fn("flashcl_context_cl_context", c_void_p, c_void_p)
context_device = _fn("flashcl_context_device", c_void_p, c_void_p)
attention_desc_init = _fn("flashcl_attention_desc_init", None,
                          POINTER(AttentionDesc))
attention_forward = _fn("flashcl_attention_forward", c_int, c_void_p,
                        c_void_p, POINTER(AttentionDesc), c_uint,
                        POINTER(c_void_p), POINTER(c_void_p))
attention_forward_host = _fn("flashcl_attention_forward_host", c_int,
                             c_void_p, POINTER(AttentionDesc), c_void_p,
                             c_void_p, c_void_p, c_void_p, c_void_p)
attention_backward = _fn("flashcl_attention_backward", c_int, c_void_p,
                         c_void_p, POINTER(AttentionDesc),
                         POINTER(BackwardDesc), c_uint, POINTER(c_void_p),
                         POINTER(c_void_p))
attention_backward_host = _fn("flashcl_attention_backward_host", c_int,
                              c_void_p, POINTER(AttentionDesc), c_void_p,
                              c_void_p, c_void_p, c_void_p, c_void_p,
                              c_void_p, c_void_p, c_void_p, c_void_p,
                              c_void_p)
combine_partials = _fn("flashcl_combine_partials", c_int, c_void_p, c_void_p,
                       POINTER(CombineDesc), c_uint, POINTER(c_void_p),
                       POINTER(c_void_p))
context_device_info = _fn("flashcl_context_device_info", c_int, c_void_p,
                          POINTER(DeviceInfo))

_v = version_number()
if (_v // 10000, _v // 100 % 100) < HEADER_VERSION[:2] or _v // 10000 != HEADER_VERSION[0]:
    raise ImportError(
        f"{library_path} is libflashcl {version_string().decode()}; this "
        f"package needs {HEADER_VERSION[0]}.{HEADER_VERSION[1]} or a later "
        f"{HEADER_VERSION[0]}.x (descriptor with struct_size)")


# ---- the few OpenCL calls the package makes itself ----------------------
# The same ICD loader libflashcl links with (already in the process).

CL_SUCCESS = 0
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_DEVICE_NOT_FOUND = -1
CL_MEM_READ_WRITE = 1 << 0
CL_MEM_READ_ONLY = 1 << 2
CL_MEM_COPY_HOST_PTR = 1 << 5
CL_TRUE = 1

try:
    ocl = ctypes.CDLL("libOpenCL.so.1")
except OSError:  # pragma: no cover - libflashcl itself needs it
    ocl = ctypes.CDLL(ctypes.util.find_library("OpenCL") or "libOpenCL.so")

clGetPlatformIDs = ocl.clGetPlatformIDs
clGetPlatformIDs.restype = c_int
clGetPlatformIDs.argtypes = [c_uint, POINTER(c_void_p), POINTER(c_uint)]
clGetDeviceIDs = ocl.clGetDeviceIDs
clGetDeviceIDs.restype = c_int
clGetDeviceIDs.argtypes = [c_void_p, c_uint64, c_uint, POINTER(c_void_p),
                           POINTER(c_uint)]
clCreateBuffer = ocl.clCreateBuffer
clCreateBuffer.restype = c_void_p
clCreateBuffer.argtypes = [c_void_p, c_uint64, c_size_t, c_void_p,
                           POINTER(c_int)]
clReleaseMemObject = ocl.clReleaseMemObject
clReleaseMemObject.restype = c_int
clReleaseMemObject.argtypes = [c_void_p]
clReleaseEvent = ocl.clReleaseEvent
clReleaseEvent.restype = c_int
clReleaseEvent.argtypes = [c_void_p]
clEnqueueReadBuffer = ocl.clEnqueueReadBuffer
clEnqueueReadBuffer.restype = c_int
clEnqueueReadBuffer.argtypes = [c_void_p, c_void_p, c_uint, c_size_t,
                                c_size_t, c_void_p, c_uint, POINTER(c_void_p),
                                POINTER(c_void_p)]


def decode(raw) -> str:
    return raw.decode("utf-8", "replace") if raw else ""
