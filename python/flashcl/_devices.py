"""Devices and the per-device flashcl contexts (created once, reused)."""
from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass

from . import _lib
from ._errors import InvalidValueError, error_for

_lock = threading.Lock()
_by_spec: dict = {}     # spec key -> _Context
_by_device: dict = {}   # cl_device_id -> _Context (flashcl's own contexts)
_by_queue_ctx: dict = {}  # (cl_context, cl_device_id) -> _Context (wrapped)


class _Context:
    """A flashcl_context handle, kept for the life of the process."""

    __slots__ = ("handle", "cl_context", "device", "queue", "wrapped")

    def __init__(self, handle, wrapped):
        self.handle = handle
        self.cl_context = _lib.context_cl_context(handle)
        self.device = _lib.context_device(handle)
        self.queue = _lib.context_queue(handle)
        self.wrapped = wrapped

    def last_error(self) -> str:
        return _lib.decode(_lib.context_last_error(self.handle))

    def check(self, status):
        if status != 0:
            raise error_for(status, self.last_error())


def _create(spec):
    out = ctypes.c_void_p()
    status = _lib.context_create(
        ctypes.byref(out), None if spec is None else spec.encode())
    if status != 0:
        raise error_for(status, _lib.decode(_lib.last_create_error()))
    return out.value


def _spec_of(device):
    if device is None:
        return None
    if isinstance(device, Device):
        return device.spec
    if isinstance(device, bool):
        raise InvalidValueError(f"device = {device!r}: give None, an index, "
                                f"a spec string or a flashcl.Device")
    if isinstance(device, int):
        return str(device)
    if isinstance(device, str):
        return device
    raise InvalidValueError(f"device = {device!r}: give None, an index, a "
                            f"spec string or a flashcl.Device")


def context_for(device=None) -> _Context:
    """The cached flashcl context of a device (None: the library's default,
    FLASHCL_DEVICE if set, else the first GPU, else the first device)."""
    spec = _spec_of(device)
    key = ("default", os.environ.get("FLASHCL_DEVICE", "")) if spec is None \
        else ("spec", spec)
    with _lock:
        ctx = _by_spec.get(key)
        if ctx is not None:
            return ctx
        handle = _create(spec)
        device_id = _lib.context_device(handle)
        ctx = _by_device.get(device_id)
        if ctx is None:
            ctx = _by_device[device_id] = _Context(handle, wrapped=False)
        else:  # another spec of a device we already have
            _lib.context_release(handle)
        _by_spec[key] = ctx
        return ctx


def context_for_queue(queue) -> _Context:
    """The cached flashcl context wrapping a pyopencl CommandQueue's
    cl_context and device (flashcl_context_create_from_queue on the first
    queue seen; later queues of the same context and device share it and
    are passed to each call)."""
    key = (queue.context.int_ptr, queue.device.int_ptr)
    with _lock:
        ctx = _by_queue_ctx.get(key)
        if ctx is None:
            out = ctypes.c_void_p()
            status = _lib.context_create_from_queue(ctypes.byref(out),
                                                    queue.int_ptr)
            if status != 0:
                raise error_for(status, _lib.decode(_lib.last_create_error()))
            ctx = _by_queue_ctx[key] = _Context(out.value, wrapped=True)
        return ctx


@dataclass(frozen=True)
class Device:
    """One OpenCL device as ``flashcl info`` shows it."""
    index: int          #: index over all devices of all platforms ("N")
    spec: str           #: "P:D", a spec that names exactly this device
    name: str
    vendor: str
    platform: str
    type: str           #: "GPU", "CPU" or "other"
    driver_version: str
    opencl_c_version: str
    compute_units: int
    clock_mhz: int
    global_mem_bytes: int
    local_mem_bytes: int
    max_alloc_bytes: int
    max_work_group_size: int
    fp16_storage: bool
    bf16_storage: bool
    fp64: bool
    subgroups: bool
    nv_compute_capability: int  #: major*10+minor, 0 if not NVIDIA
    amd_gfx: str
    matrix_path: str    #: matrix instructions the device offers
    flashcl_path: str   #: which of them flashcl's kernels use there
    selected: bool      #: what device=None picks (FLASHCL_DEVICE, else ...)

    def __str__(self):
        mark = "   <== selected" if self.selected else ""
        return (f"device {self.index} ({self.spec}): {self.name}{mark}\n"
                f"  type: {self.type}, vendor: {self.vendor}, platform: "
                f"{self.platform}\n"
                f"  driver: {self.driver_version}, {self.opencl_c_version}\n"
                f"  compute units: {self.compute_units}, clock: "
                f"{self.clock_mhz} MHz, global memory: "
                f"{self.global_mem_bytes / 2**30:.2f} GiB\n"
                f"  fp16 storage: {'yes' if self.fp16_storage else 'no'}, "
                f"bf16 storage: {'yes' if self.bf16_storage else 'no'}, "
                f"fp64: {'yes' if self.fp64 else 'no'}\n"
                f"  matrix instructions: {self.matrix_path or 'none'}\n"
                f"  flashcl path: {self.flashcl_path}")


def _device_ids():
    """[(platform index, device index), ...] in the library's order."""
    n = ctypes.c_uint(0)
    if _lib.clGetPlatformIDs(0, None, ctypes.byref(n)) != 0 or n.value == 0:
        return []
    platforms = (ctypes.c_void_p * n.value)()
    if _lib.clGetPlatformIDs(n.value, platforms, None) != 0:
        return []
    out = []
    for p, platform in enumerate(platforms):
        count = ctypes.c_uint(0)
        if _lib.clGetDeviceIDs(platform, _lib.CL_DEVICE_TYPE_ALL, 0, None,
                               ctypes.byref(count)) != 0:
            continue
        out += [(p, d) for d in range(count.value)]
    return out


def device_info(ctx: _Context) -> _lib.DeviceInfo:
    info = _lib.DeviceInfo()
    ctx.check(_lib.context_device_info(ctx.handle, ctypes.byref(info)))
    return info


def devices() -> list:
    """Every OpenCL device of every platform, in the order of flashcl's
    device spec index, with what flashcl runs there. Opens (and caches) a
    flashcl context per device; compiles nothing. [] without OpenCL."""
    try:
        default = context_for(None).device
    except Exception:  # a bad FLASHCL_DEVICE still lists the devices
        default = None
    result = []
    for index, (p, d) in enumerate(_device_ids()):
        spec = f"{p}:{d}"
        ctx = context_for(spec)
        i = device_info(ctx)
        s = _lib.decode
        result.append(Device(
            index=index, spec=spec, name=s(i.name), vendor=s(i.vendor),
            platform=s(i.platform),
            type="GPU" if i.is_gpu else "CPU" if i.is_cpu else "other",
            driver_version=s(i.driver_version),
            opencl_c_version=s(i.opencl_c_version),
            compute_units=i.compute_units, clock_mhz=i.clock_mhz,
            global_mem_bytes=i.global_mem_bytes,
            local_mem_bytes=i.local_mem_bytes,
            max_alloc_bytes=i.max_alloc_bytes,
            max_work_group_size=i.max_work_group_size,
            fp16_storage=bool(i.fp16_storage), bf16_storage=bool(i.bf16_storage),
            fp64=bool(i.has_fp64), subgroups=bool(i.has_subgroups),
            nv_compute_capability=i.nv_compute_capability,
            amd_gfx=s(i.amd_gfx), matrix_path=s(i.matrix_path),
            flashcl_path=s(i.flashcl_path),
            selected=ctx.device == default))
    return result
