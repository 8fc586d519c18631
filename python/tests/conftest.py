"""Shared fixtures. The suite needs an OpenCL device: without one the
fixtures fail (errors), they never skip."""
import numpy as np
import pytest

import flashcl

TOL = {  # max |o - ref| / max |ref| against the float64 reference
    "float32": 2e-5,
    "float64": 1e-12,
    "float16": 4e-3,
    "bfloat16": 3e-2,
}


def dtype_of(name):
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def randn(rng, shape, dtype="float32", scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype_of(dtype))


@pytest.fixture(scope="session")
def device():
    found = flashcl.devices()
    assert found, "no OpenCL device: the Python tests need one (PoCL in CI)"
    selected = [d for d in found if d.selected]
    assert len(selected) == 1
    return selected[0]


@pytest.fixture(scope="session")
def cl_queue(device):
    """A pyopencl queue on the device flashcl picks by default."""
    import pyopencl as cl
    platform, index = map(int, device.spec.split(":"))
    cl_device = cl.get_platforms()[platform].get_devices()[index]
    assert cl_device.name.strip() == device.name.strip()
    return cl.CommandQueue(cl.Context([cl_device]))
