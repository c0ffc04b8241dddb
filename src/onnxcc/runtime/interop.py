"""What `CompiledModel.run` accepts: numpy arrays, anything with `__dlpack__` (a CPU torch
tensor, a CuPy array on the host side, a JAX array), numpy scalars, Python lists and numbers;
and the `out=` buffers it writes into.

One rule for the dtype, whatever the input's type: a value that carries a dtype (an array, a
DLPack tensor, a numpy scalar) must have the model's, else the error names the input and its
dtype; Python lists and numbers, which carry none, take the model's dtype when that keeps their
kind (floats stay floats, ints may become floats, never floats ints). `cast=True` converts
anything to the model's dtype instead (numpy's unsafe casting). A DLPack tensor is viewed in
place (no copy) when it is on the CPU and compact row-major; otherwise it is copied once.
"""

from __future__ import annotations

import numpy as np

from onnxcc.errors import GuardError

_KDL_CPU = (1, 3)  # kDLCPU, kDLCUDAHost: host memory numpy can view


def _from_dlpack(name: str, x) -> np.ndarray:
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None:
        kind = dev()[0]
        if int(kind) not in _KDL_CPU:
            raise GuardError(f'input "{name}": a tensor on DLPack device type {int(kind)}; run() takes host memory '
                             "(copy it to the CPU first, or use run_device for a CUDA artifact)")
    try:
        return np.from_dlpack(x)
    except (TypeError, BufferError, RuntimeError) as e:
        raise GuardError(f'input "{name}": cannot view {type(x).__name__} through DLPack ({e})') from None


def as_input(name: str, dtype_name: str, want: np.dtype, x, cast: bool) -> np.ndarray:
    """Input `name` as a C-contiguous numpy array of dtype `want` (see the module docstring)."""
    if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__") and not isinstance(x, np.generic):
        x = _from_dlpack(name, x)
    if isinstance(x, np.generic):
        x = np.asarray(x)
    if not isinstance(x, np.ndarray):  # a Python number or (nested) list: no dtype of its own
        try:
            got = np.asarray(x)
        except (ValueError, TypeError) as e:
            raise GuardError(f'input "{name}": cannot make an array of {type(x).__name__} ({e})') from None
        if cast or np.can_cast(got.dtype, want, "same_kind") or got.size == 0:
            x = got.astype(want, copy=False)
        else:
            raise GuardError(f'input "{name}": expected dtype {dtype_name} ({want}); the {type(x).__name__} '
                             f"holds {got.dtype} values (pass cast=True to convert)")
    if x.dtype != want:
        if not cast:
            raise GuardError(f'input "{name}": expected dtype {dtype_name} ({want}), got {x.dtype} '
                             "(pass cast=True to convert)")
        x = x.astype(want)
    # not ascontiguousarray: it turns rank-0 arrays into rank 1
    return x if x.flags.c_contiguous else np.array(x, order="C")


def as_output(name: str, dtype_name: str, want: np.dtype, shape: tuple[int, ...], x,
              strided: bool = False) -> np.ndarray:
    """An `out=` buffer for output `name`: written in place, so it must match exactly. With
    `strided` (an output the library serves strided) a view with strides in whole elements
    (x[:, ::2], x.T, x[::-1]) goes through as it is; the library refuses one whose elements
    share memory."""
    if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__"):
        x = _from_dlpack(name, x)
    if not isinstance(x, np.ndarray):
        raise GuardError(f'out "{name}": expected an array (numpy or DLPack), got {type(x).__name__}')
    if x.dtype != want:
        raise GuardError(f'out "{name}": expected dtype {dtype_name} ({want}), got {x.dtype}')
    if tuple(x.shape) != tuple(shape):
        raise GuardError(f'out "{name}": expected shape {list(shape)} for these inputs, got {list(x.shape)}')
    if not x.flags.c_contiguous and not (strided and all(st % x.itemsize == 0 for st in x.strides)):
        why = ("its strides are not whole elements" if strided
               else "this output is not served strided (NAME.json: strided_outputs)")
        raise GuardError(f'out "{name}": must be C-contiguous (it is written in place; {why})')
    if not x.flags.writeable:
        raise GuardError(f'out "{name}": is read-only')
    return x
