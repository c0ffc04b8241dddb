"""Device memory for CUDA artifacts from Python, through the CUDA driver API with ctypes.

Needs only numpy and the driver (libcuda.so.1, or $ONNXCC_CUDA_DRIVER); no CUDA toolkit,
no PyTorch. The loader uses it to run a target "cuda" artifact on numpy arrays (copy in,
run, copy out); `scripts/gpu_check.py` uses it to time runs on device-resident buffers.

    drv = driver()                        # cuInit, device 0's primary context made current
    x = drv.to_device(np.ones((4, 3), np.float32))
    y = drv.empty((4, 3), np.float32)
    ...                                   # model.run_device([x], [y])
    y.to_host()
"""

from __future__ import annotations

import ctypes
import functools
import os

import numpy as np

from onnxcc.errors import RuntimeCallError

KDL_CUDA = 2


class CudaError(RuntimeCallError):
    """The driver is missing or a driver call failed."""


class Driver:
    """The few driver calls Python needs, with a device's primary context current."""

    def __init__(self, device: int = 0, path: str | None = None):
        path = path or os.environ.get("ONNXCC_CUDA_DRIVER") or "libcuda.so.1"
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as e:
            raise CudaError(f"no CUDA driver: cannot load {path} ({e})") from None
        self.device = device
        self._call("cuInit", ctypes.c_uint(0))
        dev = ctypes.c_int()
        self._call("cuDeviceGet", ctypes.byref(dev), ctypes.c_int(device))
        self.ctx = ctypes.c_void_p()
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(self.ctx), dev)
        self.make_current()

    def _call(self, name: str, *args) -> None:
        fn = getattr(self.lib, name)
        fn.restype = ctypes.c_int
        r = fn(*args)
        if r != 0:
            msg = ctypes.c_char_p()
            self.lib.cuGetErrorString(r, ctypes.byref(msg))
            raise CudaError(f"{name} failed with CUDA error {r}: {(msg.value or b'?').decode()}")

    def make_current(self) -> None:
        """Make the device's primary context current on the calling thread."""
        self._call("cuCtxSetCurrent", self.ctx)

    def alloc(self, nbytes: int) -> int:
        p = ctypes.c_uint64()
        self._call("cuMemAlloc_v2", ctypes.byref(p), ctypes.c_size_t(max(1, nbytes)))
        return p.value

    def free(self, ptr: int) -> None:
        self._call("cuMemFree_v2", ctypes.c_uint64(ptr))

    def htod(self, ptr: int, a: np.ndarray) -> None:
        a = np.ascontiguousarray(a)
        if a.nbytes:
            self._call("cuMemcpyHtoD_v2", ctypes.c_uint64(ptr), ctypes.c_void_p(a.ctypes.data),
                       ctypes.c_size_t(a.nbytes))

    def dtoh(self, a: np.ndarray, ptr: int) -> None:
        if a.nbytes:
            self._call("cuMemcpyDtoH_v2", ctypes.c_void_p(a.ctypes.data), ctypes.c_uint64(ptr),
                       ctypes.c_size_t(a.nbytes))

    def synchronize(self) -> None:
        self._call("cuCtxSynchronize")

    def empty(self, shape, dtype) -> DeviceArray:
        dt = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        return DeviceArray(self, self.alloc(n), tuple(shape), dt)

    def to_device(self, a: np.ndarray) -> DeviceArray:
        d = self.empty(a.shape, a.dtype)
        self.htod(d.ptr, a)
        return d


class DeviceArray:
    """A compact row-major array in device memory (freed with the object)."""

    def __init__(self, drv: Driver, ptr: int, shape: tuple[int, ...], dtype: np.dtype):
        self.drv, self.ptr, self.shape, self.dtype = drv, ptr, shape, dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def to_host(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        self.drv.dtoh(out, self.ptr)
        return out

    def __del__(self):
        ptr, self.ptr = getattr(self, "ptr", 0), 0
        if ptr:
            try:
                self.drv.free(ptr)
            except Exception:
                pass


@functools.cache
def driver(device: int = 0) -> Driver:
    return Driver(device)
