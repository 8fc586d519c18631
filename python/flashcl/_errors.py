"""flashcl.Error and one subclass per flashcl_status."""
from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """flashcl_status (include/flashcl.h), same values."""
    SUCCESS = 0
    NULL_ARGUMENT = 1
    INVALID_DIMENSION = 2
    HEAD_GROUPING = 3
    HEAD_DIM_UNSUPPORTED = 4
    DTYPE_UNSUPPORTED = 5
    INVALID_LAYOUT = 6
    OUT_OF_BOUNDS = 7
    CONTEXT_MISMATCH = 8
    ALIASING = 9
    INVALID_VALUE = 10
    DEVICE_NOT_FOUND = 11
    NO_OPENCL = 12
    BUILD_FAILED = 13
    OPENCL = 14
    OUT_OF_MEMORY = 15
    UNSUPPORTED = 16
    BACKEND = 17


class Error(RuntimeError):
    """A flashcl call failed.

    ``status`` is the :class:`Status`, ``message`` the library's detail
    (``flashcl_context_last_error`` / ``flashcl_last_create_error``: the
    argument and why, or the build log), or the Python layer's when it
    refused the call before the library saw it (shapes it cannot express
    in a descriptor, e.g. q and k with different batch sizes).
    """

    status: Status = None  # set on subclasses

    def __init__(self, message: str, status: Status | int | None = None):
        if status is not None:
            try:
                self.status = Status(status)
            except ValueError:  # a status newer than this module
                self.status = int(status)
        self.message = message
        super().__init__(f"{self.status_name}: {message}" if message
                         else self.status_name)

    @property
    def status_name(self) -> str:
        """The library's name of the status (flashcl_status_string)."""
        if self.status is None:
            return "error"
        from . import _lib
        return _lib.decode(_lib.status_string(int(self.status)))


def _sub(name, status, *bases, doc):
    cls = type(name, (Error,) + bases, {"status": status, "__doc__": doc,
                                         "__module__": "flashcl"})
    return cls


NullArgumentError = _sub("NullArgumentError", Status.NULL_ARGUMENT, ValueError,
                         doc="A required array or buffer is missing (None).")
InvalidDimensionError = _sub("InvalidDimensionError", Status.INVALID_DIMENSION,
                             ValueError, doc="A shape is wrong or inconsistent.")
HeadGroupingError = _sub("HeadGroupingError", Status.HEAD_GROUPING, ValueError,
                         doc="heads_q is not a multiple of heads_kv.")
HeadDimUnsupportedError = _sub("HeadDimUnsupportedError",
                               Status.HEAD_DIM_UNSUPPORTED, ValueError,
                               doc="head_dim outside 1..256.")
DtypeUnsupportedError = _sub("DtypeUnsupportedError", Status.DTYPE_UNSUPPORTED,
                             TypeError,
                             doc="A dtype flashcl does not take, or q/k/v "
                                 "dtypes that differ.")
InvalidLayoutError = _sub("InvalidLayoutError", Status.INVALID_LAYOUT,
                          ValueError, doc="Unknown layout, or strides/offset "
                                          "flashcl cannot address.")
OutOfBoundsError = _sub("OutOfBoundsError", Status.OUT_OF_BOUNDS, ValueError,
                        doc="A view reaches outside its buffer.")
ContextMismatchError = _sub("ContextMismatchError", Status.CONTEXT_MISMATCH,
                            ValueError,
                            doc="Buffers or queue of another OpenCL context.")
AliasingError = _sub("AliasingError", Status.ALIASING, ValueError,
                     doc="An output overlaps an input or itself.")
InvalidValueError = _sub("InvalidValueError", Status.INVALID_VALUE, ValueError,
                         doc="A bad scalar or option (scale, window, enum).")
DeviceNotFoundError = _sub("DeviceNotFoundError", Status.DEVICE_NOT_FOUND,
                           doc="The device spec matched no OpenCL device.")
NoOpenCLError = _sub("NoOpenCLError", Status.NO_OPENCL,
                     doc="No OpenCL platform or device at all.")
BuildFailedError = _sub("BuildFailedError", Status.BUILD_FAILED,
                        doc="A kernel failed to compile (log in message).")
OpenCLError = _sub("OpenCLError", Status.OPENCL,
                   doc="An OpenCL call failed (code in message).")
OutOfMemoryError = _sub("OutOfMemoryError", Status.OUT_OF_MEMORY, MemoryError,
                        doc="A host or device allocation failed.")
# Also a NotImplementedError: what flashcl cannot do (fp64 without
# cl_khr_fp64, FlashAttention-2's dropout) is caught as one.
UnsupportedError = _sub("UnsupportedError", Status.UNSUPPORTED,
                        NotImplementedError,
                        doc="A valid request this build or device cannot run "
                            "(e.g. float64 without cl_khr_fp64).")
BackendError = _sub("BackendError", Status.BACKEND,
                    doc="The reference backend (CLBlast) failed.")

_BY_STATUS = {cls.status: cls for cls in (
    NullArgumentError, InvalidDimensionError, HeadGroupingError,
    HeadDimUnsupportedError, DtypeUnsupportedError, InvalidLayoutError,
    OutOfBoundsError, ContextMismatchError, AliasingError, InvalidValueError,
    DeviceNotFoundError, NoOpenCLError, BuildFailedError, OpenCLError,
    OutOfMemoryError, UnsupportedError, BackendError)}

ERROR_CLASSES = tuple(_BY_STATUS.values())


def error_for(status: int, message: str) -> Error:
    """The exception for a non-zero flashcl_status."""
    try:
        cls = _BY_STATUS[Status(status)]
    except (ValueError, KeyError):
        return Error(message, status)  # unknown to this module: the number
    return cls(message)
