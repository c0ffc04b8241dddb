"""Load a built artifact (libNAME.so + NAME.json) and call it with numpy arrays.

Needs only numpy, ctypes and the artifact's own files: nothing of the compiler is
imported, so a deployed artifact runs where sympy and llvmlite are not installed.

    >>> m = load("build/mlp")                        # doctest: +SKIP
    >>> m.run({"x": np.ones((4, 3), np.float32)})    # doctest: +SKIP
    {'y': array(...)}
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

from onnxcc.errors import GuardError, OnnxccError, RuntimeCallError

from . import strings as str_io
from .interop import as_input, as_output
from .out_pool import OutPool, from_env
from .shape_memo import MAX_ENTRIES, shapes_follow_input_shapes


class ArtifactError(OnnxccError):
    """An artifact that must not be loaded: its library is missing, outside the artifact
    directory, or not the file NAME.json recorded (truncated, rebuilt, swapped)."""

# dtype name in NAME.json -> (numpy dtype, DLPack code, bits). bf16 travels as uint16 bits
# (ml_dtypes.bfloat16 arrays are taken too); the small types are ml_dtypes' arrays, one
# element per byte, packed for the call where they are narrower than a byte (below).
DTYPES = {
    "f16": (np.float16, 2, 16), "bf16": (np.uint16, 4, 16), "f32": (np.float32, 2, 32),
    "f64": (np.float64, 2, 64), "i8": (np.int8, 0, 8), "i16": (np.int16, 0, 16),
    "i32": (np.int32, 0, 32), "i64": (np.int64, 0, 64), "u8": (np.uint8, 1, 8),
    "u16": (np.uint16, 1, 16), "u32": (np.uint32, 1, 32), "u64": (np.uint64, 1, 64),
    "bool": (np.bool_, 6, 8),
    # strings: object arrays of str here, `const char *` per element in the call (strings.py)
    "str": (np.dtype(object), 3, 64),
}
# The small types: DLPack 1.1's codes for the 8- and 4-bit floats; sub-byte integers are
# kDLInt / kDLUInt with bits 4 or 2. Sub-byte tensors are packed in the call (DLPack's and
# ONNX's layout: element k of the flattened tensor in byte k // (8 // bits), lowest bits first).
_SMALL = {
    "f8e4m3fn": ("float8_e4m3fn", 10, 8), "f8e4m3fnuz": ("float8_e4m3fnuz", 11, 8),
    "f8e5m2": ("float8_e5m2", 12, 8), "f8e5m2fnuz": ("float8_e5m2fnuz", 13, 8),
    "f8e8m0": ("float8_e8m0fnu", 14, 8), "f4e2m1": ("float4_e2m1fn", 17, 4),
    "i4": ("int4", 0, 4), "u4": ("uint4", 1, 4), "i2": ("int2", 0, 2), "u2": ("uint2", 1, 2),
}
try:
    import ml_dtypes as _ml

    DTYPES.update({k: (np.dtype(getattr(_ml, t)), code, bits) for k, (t, code, bits) in _SMALL.items()})
    _BF16: np.dtype | None = np.dtype(_ml.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes comes with onnx; without it, no small types
    _BF16 = None


def pack_subbyte(a: np.ndarray, bits: int) -> np.ndarray:
    """An array of a sub-byte type (one element per byte) packed 8 // bits per byte."""
    per = 8 // bits
    c = np.ascontiguousarray(a).reshape(-1).view(np.uint8) & np.uint8((1 << bits) - 1)
    c = np.concatenate([c, np.zeros((-c.size) % per, np.uint8)]).reshape(-1, per)
    out = np.zeros(max(1, c.shape[0]), np.uint8)
    for k in range(per):
        out[: c.shape[0]] |= c[:, k] << np.uint8(k * bits)
    return out


def unpack_subbyte(packed: np.ndarray, out: np.ndarray, bits: int) -> None:
    """Fill `out` (a sub-byte type, one element per byte) from packed bytes."""
    per, n = 8 // bits, out.size
    codes = ((packed[:, None] >> (np.arange(per, dtype=np.uint8) * np.uint8(bits))) & np.uint8((1 << bits) - 1))
    out.reshape(-1).view(np.uint8)[:] = codes.reshape(-1)[:n]  # ml_dtypes keeps the bare codes

KDL_CPU = 1
#: the newest C ABI (NAME.json abi_version, NAME_abi_version()) this loader can call
LOADER_ABI = 1

# Codes that mean "these inputs do not fit the model" rather than "the run failed".
_GUARD_CODES = ("ERR_DTYPE", "ERR_SHAPE", "ERR_CONSTRAINT", "ERR_GUARD")


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
        ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor)))]


class _ManagedBlock:
    """A tensor NAME_run_alloc allocated, seen by numpy through `__array_interface__` (no
    copy); the arrays over it keep it alive, and its deleter runs when the last one goes."""

    def __init__(self, ptr, typestr: str):
        self._ptr = ptr
        t = ptr.contents.dl_tensor
        shape = tuple(t.shape[j] for j in range(t.ndim))
        item = np.dtype(typestr).itemsize
        strides = tuple(t.strides[j] * item for j in range(t.ndim)) if t.strides else None
        self.__array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                    "data": (t.data or 0, False), "version": 3}

    def __del__(self):
        p, self._ptr = self._ptr, None
        if p:
            p.contents.deleter(p)


def dlpack_dtype(dt: np.dtype) -> tuple[int, int]:
    """(code, bits) of a numpy dtype as DLPack spells it."""
    dt = np.dtype(dt)
    if dt == np.bool_:
        return 6, 8
    kind = {"i": 0, "u": 1, "f": 2, "c": 5}.get(dt.kind)
    if kind is None:
        raise TypeError(f"numpy dtype {dt} has no DLPack equivalent")
    return kind, dt.itemsize * 8


class _Tensors:
    """A ctypes DLTensor array over numpy arrays; keeps the arrays and shapes alive.
    `device` / `data`: (DLPack device type, id) and data pointers for arrays living
    elsewhere (then `arrays` only give shapes and dtypes)."""

    def __init__(self, arrays: list[np.ndarray], dtypes: list[str] | None = None,
                 device: tuple[int, int] = (KDL_CPU, 0), data: list[int] | None = None, out: bool = False):
        self.arrays = arrays
        # string tensors travel as arrays of pointers: k -> (pointers, the bytes they point into)
        self.strs: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        for k, a in enumerate(arrays):
            if dtypes and dtypes[k] == "str" and data is None:
                self.strs[k] = (np.zeros(a.shape, np.uint64), None) if out else str_io.encode(a)
        self.shapes = [(ctypes.c_int64 * max(1, a.ndim))(*a.shape) for a in arrays]
        # a strided view (only inputs the dispatcher serves strided get here): its strides
        self.strides = [None if a.flags.c_contiguous or data is not None
                        else (ctypes.c_int64 * max(1, a.ndim))(*(_element_strides(a) or ())) for a in arrays]
        self.array = (DLTensor * max(1, len(arrays)))()
        self.packed: dict[int, np.ndarray] = {}  # k -> the packed bytes of a sub-byte tensor
        for k, (t, a, shape) in enumerate(zip(self.array, arrays, self.shapes)):
            # The signature's dtype wins where given: bf16 data sits in uint16 arrays.
            code, bits = DTYPES[dtypes[k]][1:] if dtypes else dlpack_dtype(a.dtype)
            if bits < 8 and data is None:
                self.packed[k] = pack_subbyte(a, bits)
            held = self.packed.get(k, self.strs[k][0] if k in self.strs else a)
            t.data = held.ctypes.data if data is None else data[k]
            t.device = DLDevice(*device)
            t.ndim = a.ndim
            t.dtype = DLDataType(code, bits, 1)
            t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
            st = self.strides[k]
            t.strides = None if st is None else ctypes.cast(st, ctypes.POINTER(ctypes.c_int64))
            t.byte_offset = 0

    def __len__(self) -> int:
        return len(self.arrays)

    def unpack(self) -> None:
        """Copy packed sub-byte results back into their arrays (after a call)."""
        for k, p in self.packed.items():
            unpack_subbyte(p, self.arrays[k], int(self.array[k].dtype.bits))



def _element_strides(a: np.ndarray) -> tuple[int, ...] | None:
    """a's strides in elements (DLPack's unit); None where a byte stride is not a multiple
    of the item size (such an array is copied compact instead)."""
    size = a.itemsize
    if any(s % size for s in a.strides):
        return None
    return tuple(s // size for s in a.strides)


def _data_ptr_slow(a: np.ndarray) -> int:
    return a.ctypes.data


def _pick_data_ptr():
    """A fast reader of an ndarray's data pointer: CPython's numpy keeps it right after the
    object header (PyArrayObject_fields.data), ~7x cheaper to read than `a.ctypes.data`.
    Used only where it agrees with `a.ctypes.data` on a few probes; else the slow form."""
    at = ctypes.c_void_p.from_address
    off = 2 * ctypes.sizeof(ctypes.c_void_p)  # past ob_refcnt, ob_type

    def fast(a: np.ndarray) -> int:
        return at(id(a) + off).value or 0

    try:
        base = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
        probes = [base, base[1], base[:, 1:, 2:], np.zeros(()), np.empty((0, 3), np.int8),
                  np.frombuffer(bytearray(16), np.uint8)[3:], base.T]
        agrees = all(fast(a) == a.ctypes.data for a in probes)
    except Exception:
        agrees = False
    return fast if agrees else _data_ptr_slow


_data_ptr = _pick_data_ptr()

_SLOT = 6        # int64 words per DLTensor (48 bytes: data, device, ndim|dtype, shape, strides, offset)
_MAX_RANK = 64   # numpy's NPY_MAXDIMS; each slot owns this many int64 shape entries
# run() writes DLTensors as raw int64 words, which needs this exact (x86-64 / aarch64) layout;
# anywhere else it takes the portable path through _Tensors.
_WORD_LAYOUT = (sys.byteorder == "little" and ctypes.sizeof(DLTensor) == _SLOT * 8
                and [getattr(DLTensor, f).offset for f in
                     ("data", "device", "ndim", "dtype", "shape", "strides", "byte_offset")]
                == [0, 8, 16, 20, 24, 32, 40])


def _tag(code: int, bits: int) -> int:
    """The DLTensor word holding ndim (low 32 bits, or-ed in per call) and dtype (high 32)."""
    return (code << 32) | (bits << 40) | (1 << 48)


def _in_order(values, names: list[str]) -> list | None:
    """`values` (a dict by name or a list, exactly one per name) in the order of `names`, or
    None for anything else (the short run path's fallback: the checked path names the fault)."""
    if type(values) is dict and len(values) == len(names):
        try:
            return [values[n] for n in names]
        except KeyError:
            return None
    if type(values) is list and len(values) == len(names):
        return values
    return None


class _Scratch:
    """Per-thread DLTensor arrays (as raw int64 words) with their shape buffers, reused across
    calls: a thread fills them, calls the library (which reads them only during the call)
    and is done, so threads never share one and re-use within a thread is safe. A plain
    object held by a threading.local (`CompiledModel._tls.sc`): the local's own attributes
    cost ~10x a plain one's to read, and run() reads several per call."""

    def __init__(self, n_in: int, n_out: int, dev_word: int):
        self.iw, self.ish, self.iaddr = self._slots(max(1, n_in), dev_word)
        self.ow, self.osh, self.oaddr = self._slots(max(1, n_out), dev_word)
        self.ist = (ctypes.c_int64 * (_MAX_RANK * max(1, n_in)))()  # input strides, per slot
        self.ist_base = ctypes.addressof(self.ist)
        self.ost = (ctypes.c_int64 * (_MAX_RANK * max(1, n_out)))()  # output strides, per slot
        self.ost_base = ctypes.addressof(self.ost)
        self.tmp = (ctypes.c_int64 * _MAX_RANK)()
        self.tmp_addr = ctypes.c_void_p(ctypes.addressof(self.tmp))
        #: the input shapes every word but the data pointers was last written for (compact
        #: inputs, fresh outputs of the shapes in `outs`), or None: then run() writes them all
        self.key: tuple | None = None
        #: per output: (shape, dtype, bytes) for `key`
        self.outs: tuple = ()

    @staticmethod
    def _slots(n: int, dev_word: int):
        words = (ctypes.c_int64 * (_SLOT * n))()
        shapes = (ctypes.c_int64 * (_MAX_RANK * n))()
        base = ctypes.addressof(shapes)
        for k in range(n):
            words[_SLOT * k + 1] = dev_word
            words[_SLOT * k + 3] = base + 8 * _MAX_RANK * k  # strides (4) and byte_offset (5) stay 0
        return words, shapes, ctypes.c_void_p(ctypes.addressof(words))


# ---- loading libraries by content ----------------------------------------------------------
#
# dlopen hands back the object already loaded from the same path (or the same inode), so a
# library rebuilt in place and loaded again in one process would run the old code. Each
# library is therefore loaded from a private copy named by its sha256: new content, new
# path, new object; the same content loads once. The copy is written from the very bytes
# that were hashed and checked against NAME.json, so what runs is what was verified, and a
# file truncated or rewritten later cannot fault the mapping (SIGBUS) or change it.

_LIB_LOCK = threading.Lock()
_LIB_DIR: Path | None = None


def _private_dir() -> Path:
    global _LIB_DIR
    if _LIB_DIR is None:
        _LIB_DIR = Path(tempfile.mkdtemp(prefix="onnxcc-libs-"))  # mode 0700: this user only
        atexit.register(shutil.rmtree, _LIB_DIR, True)  # mapped copies stay valid once unlinked
    return _LIB_DIR


def _check_library(meta: dict, lib_path: Path, data: bytes) -> str:
    """sha256 of `data` (the library's bytes), checked against NAME.json where it records them."""
    size, want = meta.get("library_size"), meta.get("library_sha256")
    build = meta.get("build_id")
    if isinstance(size, int) and len(data) < size:
        raise ArtifactError(f"{lib_path}: {len(data)} bytes, but {meta['name']}.json records {size} "
                            "(truncated; rebuild the artifact)")
    if isinstance(build, str) and build and build.encode() not in data:
        raise ArtifactError(f"{lib_path} is not from build {build} that {meta['name']}.json records "
                            "(library and metadata from different compiles; rebuild, or copy the whole "
                            "artifact directory)")
    if size is not None and len(data) != size:
        raise ArtifactError(f"{lib_path}: {len(data)} bytes, but {meta['name']}.json records {size} "
                            "(truncated or replaced; rebuild the artifact)")
    digest = hashlib.sha256(data).hexdigest()
    if want is not None and digest != want:
        raise ArtifactError(f"{lib_path}: sha256 {digest[:16]}... does not match {meta['name']}.json's "
                            f"{str(want)[:16]}... (modified or replaced; rebuild the artifact)")
    if data[:4] != b"\x7fELF":
        raise ArtifactError(f"{lib_path}: not a shared library (no ELF header)")
    return digest


def _load_by_content(meta: dict, lib_path: Path) -> tuple[ctypes.CDLL, Path]:
    try:
        data = lib_path.read_bytes()
    except OSError as e:
        raise ArtifactError(f"{lib_path}: cannot read the library: {e.strerror or e}") from e
    digest = _check_library(meta, lib_path, data)
    with _LIB_LOCK:
        d = _private_dir() / digest
        copy = d / lib_path.name
        if not copy.is_file():
            d.mkdir(exist_ok=True)
            tmp = d / f".{lib_path.name}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, copy)
        try:
            return ctypes.CDLL(str(copy)), copy
        except OSError as e:
            raise ArtifactError(f"{lib_path}: cannot load the library: {e}") from e


class CompiledModel:
    """One loaded artifact. Thread-safe: calls release the GIL and the C side is re-entrant."""

    def __init__(self, meta: dict, lib_path: Path, out_pool: OutPool | None = None):
        self.meta = meta
        #: where run() takes its outputs from (out_pool.py): blocks reused once released
        self.out_pool = out_pool if out_pool is not None else from_env()
        self.name: str = meta["name"]
        self.inputs: list[dict] = meta["inputs"]
        self.outputs: list[dict] = meta["outputs"]
        self.codes: dict[str, int] = meta["error_codes"]
        self.path = Path(lib_path)
        #: the content-addressed private copy the library is loaded from
        self.lib, self.loaded_path = _load_by_content(meta, self.path)
        self._run = self._fn("run", ctypes.c_int, [ctypes.POINTER(DLTensor), ctypes.c_int,
                                                   ctypes.POINTER(DLTensor), ctypes.c_int])
        self._output_shape = self._fn("output_shape", ctypes.c_int, [
            ctypes.POINTER(DLTensor), ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)])
        self._last_error = self._fn("last_error", ctypes.c_char_p, [])
        self._num_versions = self._fn("num_versions", ctypes.c_int, [])
        self._version_info = self._fn("version_info", ctypes.c_char_p, [ctypes.c_int])
        self._last_version = self._fn("last_version", ctypes.c_int, [])
        self._output_dims = None  # NAME_output_dims, bound on first use (only some artifacts have it)
        self._versions_count: int | None = None
        self.build_id: str | None = self._check_identity()
        self._defaults: dict | None = None  # input_defaults(), read on first use
        #: sequence / optional I/O (io_structure.py): run() takes lists and None there
        self.structure: dict | None = (meta.get("metadata") or {}).get("structure")
        self._setup_fast_path()

    def _setup_fast_path(self) -> None:
        """Everything run() would otherwise look up per call."""
        self._in_names = [t["name"] for t in self.inputs]
        self._out_names = [t["name"] for t in self.outputs]
        self._in_np = [np.dtype(DTYPES[t["dtype"]][0]) for t in self.inputs]
        self._out_np = [np.dtype(DTYPES[t["dtype"]][0]) for t in self.outputs]
        self._in_tags = [_tag(*DTYPES[t["dtype"]][1:]) for t in self.inputs]
        self._out_tags = [_tag(*DTYPES[t["dtype"]][1:]) for t in self.outputs]
        self._out_ranks = [len(t["shape"]) for t in self.outputs]
        # An output whose dims are all literal ints has that shape whatever the inputs:
        # no NAME_output_shape call for it (the C side still checks it in NAME_run).
        self._out_static = [tuple(int(d) for d in t["shape"])
                            if all(str(d).isdigit() for d in t["shape"]) else None
                            for t in self.outputs]
        self._run_determined = [bool(t.get("run_determined")) for t in self.outputs]
        self._any_run_determined = any(self._run_determined)
        self._cuda = self.meta.get("target") == "cuda"
        self._guard_codes = frozenset(self.codes[k] for k in _GUARD_CODES)
        # sub-byte tensors are packed and unpacked around the call: the portable path does it
        self._packed = any(DTYPES[t["dtype"]][2] < 8 for t in self.inputs + self.outputs)
        # string tensors are converted around the call (strings.py): the portable path does it
        self._strings = any(t["dtype"] == "str" for t in self.inputs + self.outputs)
        self._strings_release = (self._fn("strings_release", None, [])
                                 if any(t["dtype"] == "str" for t in self.outputs) else None)
        # inputs the dispatcher serves strided (it compacts them itself): a numpy view of one
        # (x[:, ::2], x.T, np.broadcast_to) goes through with its strides, not copied here
        served = set(self.meta.get("strided_inputs", ()))
        self._strided_ok = [t["name"] in served and not self._cuda for t in self.inputs]
        # outputs it serves strided (it scatters into them): an out= view goes through as it is
        served_out = set(self.meta.get("strided_outputs", ()))
        self._strided_out_ok = [t["name"] in served_out and not self._cuda for t in self.outputs]
        # outputs sized only by the run: the library allocates them (NAME_run_alloc)
        self._run_alloc = None
        if self._any_run_determined and not self._cuda and not self._packed and not self._strings \
                and hasattr(self.lib, f"{self.name}_run_alloc"):
            self._run_alloc = self._fn("run_alloc", ctypes.c_int, [
                ctypes.POINTER(DLTensor), ctypes.c_int, ctypes.POINTER(ctypes.POINTER(DLManagedTensor)),
                ctypes.c_int])
        # Second handles on the same symbols for run(), called with c_void_p objects made once
        # (the scratch buffers' addresses) and small Python ints, which ctypes passes as C int
        # without argtypes: about half the cost of a call that converts through argtypes.
        self._run_fast = self.lib[f"{self.name}_run"]
        self._run_fast.restype = ctypes.c_int
        self._output_shape_fast = self.lib[f"{self.name}_output_shape"]
        self._output_shape_fast.restype = ctypes.c_int
        self._tls = threading.local()  # .sc: this thread's _Scratch, made on its first call
        # Output shapes per tuple of input shapes (shape_memo.py), where the shapes alone fix them;
        # with it, a thread calling again with the shapes of its last call rewrites only pointers.
        self._memo: dict[tuple, tuple] | None = (
            {} if _WORD_LAYOUT and not self._cuda and not self._packed and not self._strings
            and self._run_alloc is None and shapes_follow_input_shapes(self.meta) else None)
        self._n_in, self._n_out = len(self.inputs), len(self.outputs)

    @property
    def _scratch(self) -> _Scratch:
        """This thread's DLTensor words (made on its first call)."""
        try:
            return self._tls.sc
        except AttributeError:
            sc = self._tls.sc = _Scratch(len(self.inputs), len(self.outputs), KDL_CPU)
            return sc

    def _check_identity(self) -> str | None:
        """The library's NAME_build_id() against NAME.json's build_id and NAME.h's
        NAME_BUILD_ID (when the header is beside it): a mismatch is an ArtifactError."""
        abi = self.meta.get("abi_version", 1)
        if not isinstance(abi, int) or abi > LOADER_ABI:
            raise ArtifactError(f"{self.path}: C ABI version {abi}, but this loader knows up to {LOADER_ABI} "
                                "(built by a newer onnxcc; load it with that version)")
        want = self.meta.get("build_id")
        if want is None:
            return None  # an artifact from before build ids
        try:
            got = self._fn("build_id", ctypes.c_char_p, [])()
        except AttributeError:
            raise ArtifactError(f"{self.path}: has no {self.name}_build_id(), but {self.name}.json records build "
                                f"{want} (library and metadata from different compiles)") from None
        got = (got or b"").decode(errors="replace")
        lib_abi = self._fn("abi_version", ctypes.c_int, [])()
        if lib_abi != abi:
            raise ArtifactError(f"{self.path}: library C ABI {lib_abi}, {self.name}.json records {abi} (rebuild)")
        if got != want:
            raise ArtifactError(f"{self.path}: library build {got}, {self.name}.json records {want} "
                                "(library and metadata from different compiles; rebuild)")
        header = self.path.parent / str(self.meta.get("header", f"{self.name}.h"))
        try:
            text = header.read_text(errors="replace") if "/" not in str(self.meta.get("header", "")) else ""
        except OSError:
            return got
        m = re.search(rf'#define {re.escape(self.name.upper())}_BUILD_ID "([^"]*)"', text)
        if m and m.group(1) != got:
            raise ArtifactError(f"{header}: header build {m.group(1)}, library build {got} (header and "
                                "library from different compiles; rebuild)")
        return got

    @property
    def _defaults_names(self) -> list[str]:
        return list((self.meta.get("input_defaults") or {}).get("names", []))

    def input_defaults(self) -> dict[str, np.ndarray]:
        """The defaults of the inputs named like an initializer (ONNX IR >= 4: the caller may
        override them; a dict call that leaves one out gets its default). Read from
        NAME.defaults.npz, checked against the sha256 NAME.json records."""
        if self._defaults is None:
            info = self.meta.get("input_defaults") or {}
            if not info:
                self._defaults = {}
                return self._defaults
            name = info.get("file", "")
            path = self.path.parent / name
            if not isinstance(name, str) or "/" in name or not path.is_file():
                raise ArtifactError(f"{self.name}: input defaults file {name!r} not found beside the library")
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest != info.get("sha256"):
                raise ArtifactError(f"{path}: sha256 does not match {self.name}.json's (modified or replaced)")
            with np.load(path, allow_pickle=False) as z:
                self._defaults = {k: z[k] for k in z.files}
        return self._defaults

    def _fn(self, suffix: str, restype, argtypes):
        f = getattr(self.lib, f"{self.name}_{suffix}")
        f.restype, f.argtypes = restype, argtypes
        return f

    def __repr__(self) -> str:
        def sig(ts):
            return ", ".join(f"{t['name']}: {t['dtype']}[{', '.join(t['shape'])}]" for t in ts)

        return f"<CompiledModel {self.name} ({sig(self.inputs)}) -> ({sig(self.outputs)})>"

    # ---- introspection -----------------------------------------------------------------
    @property
    def num_versions(self) -> int:
        n = self._versions_count  # fixed for a library: asked once (Session.run reads it per call)
        if n is None:
            n = self._versions_count = self._num_versions()
        return n

    def version_info(self, i: int) -> str:
        s = self._version_info(i)
        if s is None:
            raise IndexError(f"version {i} out of range [0, {self.num_versions})")
        return s.decode()

    @property
    def last_version(self) -> int:
        """The version this thread's last run used (thread-local in C; -1 if none)."""
        return self._last_version()

    @property
    def last_error(self) -> str:
        return (self._last_error() or b"").decode(errors="replace")

    # ---- calls -------------------------------------------------------------------------
    def _input_list(self, inputs) -> list:
        if isinstance(inputs, dict):
            names = [t["name"] for t in self.inputs]
            unknown = sorted(set(inputs) - set(names))
            if unknown:
                raise GuardError(f"model {self.name} has no input(s) {', '.join(unknown)}; "
                                 f"inputs are {names}")
            missing = [n for n in names if n not in inputs]
            if missing and set(missing) <= set(self._defaults_names):
                defaults = self.input_defaults()
                inputs = {**inputs, **{n: defaults[n] for n in missing}}
                missing = []
            if missing:
                raise GuardError(f"missing input(s) {', '.join(missing)} of model {self.name}")
            return [inputs[n] for n in names]
        if isinstance(inputs, np.ndarray) or hasattr(inputs, "__dlpack__"):  # one tensor, not a list of them
            if len(self.inputs) != 1:
                raise GuardError(f"model {self.name} takes {len(self.inputs)} inputs "
                                 f"({', '.join(t['name'] for t in self.inputs)}); got one array: pass a dict "
                                 "{name: array} or a list in input order")
            return [inputs]
        inputs = list(inputs)
        if len(inputs) != len(self.inputs):
            raise GuardError(f"model {self.name} takes {len(self.inputs)} inputs, got {len(inputs)}")
        return inputs

    def _prepare(self, inputs, cast: bool = False) -> list[np.ndarray]:
        xs = None
        if type(inputs) is dict and len(inputs) == len(self._in_names):
            try:
                xs = [inputs[n] for n in self._in_names]
            except KeyError:
                pass  # _input_list says which names are wrong
        if xs is None:
            xs = self._input_list(inputs)
        arrays = []
        for sig, want, ok, x in zip(self.inputs, self._in_np, self._strided_ok, xs):
            if sig["dtype"] == "str":  # checked element by element (strings.py)
                arrays.append(str_io.as_string_input(sig["name"], x))
                continue
            if type(x) is np.ndarray and x.dtype == want and x.flags.c_contiguous:
                arrays.append(x)  # the common case, first
                continue
            if ok and isinstance(x, np.ndarray) and x.dtype == want and _element_strides(x) is not None:
                arrays.append(x)  # a strided view the dispatcher compacts: passed as it is
                continue
            if isinstance(x, np.ndarray) and x.dtype == _BF16 and sig["dtype"] == "bf16":
                x = x.view(np.uint16)  # ml_dtypes.bfloat16 in, its bits through the ABI
            arrays.append(as_input(sig["name"], sig["dtype"], want, x, cast))
        return arrays

    def _out_buffers(self, out) -> list | None:
        """out= as a list in output order (None entries: allocate), or None."""
        if out is None:
            return None
        if isinstance(out, dict):
            unknown = sorted(set(out) - set(self._out_names))
            if unknown:
                raise GuardError(f"model {self.name} has no output(s) {', '.join(unknown)}; "
                                 f"outputs are {self._out_names}")
            bufs = [out.get(n) for n in self._out_names]
        else:
            bufs = list(out)
            if len(bufs) != len(self._out_names):
                raise GuardError(f"out: model {self.name} has {len(self._out_names)} outputs, got {len(bufs)}")
        for k, b in enumerate(bufs):
            if b is not None and self._run_determined[k]:
                raise GuardError(f'out "{self._out_names[k]}": its shape is known only after the run; '
                                 "let run() allocate it")
        return bufs

    def _check(self, rc: int) -> None:
        if rc == 0:
            return
        msg = self.last_error or f"{self.name} failed with code {rc}"
        if rc in self._guard_codes:
            err = GuardError(msg)
            err.code = rc
            raise err
        late = (self.meta.get("metadata") or {}).get("runtime_constraints")
        if late and "with code 4 (" in msg:  # ERR_ASSERT: such a constraint is checked in the kernel
            msg += ("; a constraint on a run-time symbol may not hold: "
                    + "; ".join(f"{c['text']} ({c['origin']})" for c in late))
        raise RuntimeCallError(msg, rc)

    def output_shape(self, inputs, output: int | str) -> tuple[int, ...]:
        """The shape output `output` (index or name) has for these inputs."""
        return self._shape(self._in_tensors(inputs), self._output_index(output))

    def _output_index(self, output: int | str) -> int:
        if isinstance(output, str):
            names = [t["name"] for t in self.outputs]
            if output not in names:
                raise KeyError(f"model {self.name} has no output {output!r}; outputs are {names}")
            return names.index(output)
        return output

    def _in_tensors(self, inputs) -> _Tensors:
        return _Tensors(self._prepare(inputs), [t["dtype"] for t in self.inputs])

    def _shape(self, ins: _Tensors, k: int) -> tuple[int, ...]:
        shape = (ctypes.c_int64 * max(1, len(self.outputs[k]["shape"])))()
        self._check(self._output_shape(ins.array, len(ins), k, shape))
        return tuple(shape[: len(self.outputs[k]["shape"])])

    def run(self, inputs, *, out=None, cast: bool = False) -> dict[str, np.ndarray]:
        """Run on a dict {name: array} or a list in input order; returns {name: array}.

        Inputs may be numpy arrays, anything with `__dlpack__` (viewed without a copy when
        compact and on the CPU), numpy scalars or Python lists (runtime/interop.py); `cast=True`
        converts any input to the model's dtype. `out`: a dict {name: array} or a list of
        preallocated outputs (exact dtype and shape; C-contiguous, or any writable view with
        whole-element strides for the outputs NAME.json lists as "strided_outputs"), written
        in place and returned. A model with sequence / optional inputs or outputs takes a list of arrays for
        a sequence and None for an absent optional, and returns them so (io_structure.py)."""
        if self._memo is not None and self.structure is None:
            done = self._run_again(inputs, out)  # a repeat of this thread's last signature: the short way
            if done is not None:
                return done
        if self.structure is not None:
            from onnxcc.io_structure import flatten_inputs, group_outputs

            flat = self._run_flat(flatten_inputs(self.structure, inputs, self.name), out, cast)
            return group_outputs(self.structure, flat)
        return self._run_flat(inputs, out, cast)

    def _run_again(self, inputs, out=None) -> dict[str, np.ndarray] | None:
        """run() for compact inputs of exactly the model's dtypes in the shapes this thread's
        last call had: every DLTensor word but the data pointers is already in place, and the
        output shapes are known (shape_memo.py). None where that does not hold (nothing written)."""
        try:
            sc = self._tls.sc
        except AttributeError:
            return None
        if self._n_in == 1:  # the common case without the loops
            if type(inputs) is dict and len(inputs) == 1:
                x = inputs.get(self._in_names[0])
            elif type(inputs) is np.ndarray:
                x = inputs
            elif type(inputs) is list and len(inputs) == 1:
                x = inputs[0]
            else:
                return None
            if type(x) is not np.ndarray or x.dtype != self._in_np[0] or not x.flags.c_contiguous \
                    or sc.key != (x.shape,):
                return None
            sc.iw[0] = _data_ptr(x)
        else:
            xs = _in_order(inputs, self._in_names)
            if xs is None:
                return None
            for x, want in zip(xs, self._in_np):
                if type(x) is not np.ndarray or x.dtype != want or not x.flags.c_contiguous:
                    return None
            if sc.key != tuple([x.shape for x in xs]):
                return None
            iw, j = sc.iw, 0
            for x in xs:
                iw[j] = _data_ptr(x)
                j += _SLOT
        if out is not None:
            return self._run_again_into(sc, out)
        small = self.out_pool.min_bytes
        if self._n_out == 1:
            shape, dt, nbytes = sc.outs[0]
            a = np.empty(shape, dt) if nbytes < small else self._empty(0, shape, dt)
            sc.ow[0] = _data_ptr(a)
            rc = self._run_fast(sc.iaddr, self._n_in, sc.oaddr, 1)
            if rc:
                self._check(rc)
            return {self._out_names[0]: a}
        outs = []
        ow, j = sc.ow, 0
        for k, (shape, dt, nbytes) in enumerate(sc.outs):
            a = np.empty(shape, dt) if nbytes < small else self._empty(k, shape, dt)
            ow[j] = _data_ptr(a)
            j += _SLOT
            outs.append(a)
        rc = self._run_fast(sc.iaddr, self._n_in, sc.oaddr, self._n_out)
        if rc:
            self._check(rc)
        return dict(zip(self._out_names, outs))

    def _run_again_into(self, sc: _Scratch, out) -> dict[str, np.ndarray] | None:
        """_run_again's outputs for `out=`: every buffer given, each compact, writable and of
        exactly the known shape and dtype (else None: _run_flat checks them and names the fault)."""
        bufs = _in_order(out, self._out_names)
        if bufs is None:
            return None
        ow, j = sc.ow, 0
        for b, (shape, dt, _) in zip(bufs, sc.outs):
            if type(b) is not np.ndarray or b.shape != shape or b.dtype != dt:
                return None
            flags = b.flags
            if not (flags.c_contiguous and flags.writeable):
                return None
        for b in bufs:
            ow[j] = _data_ptr(b)
            j += _SLOT
        rc = self._run_fast(sc.iaddr, self._n_in, sc.oaddr, self._n_out)
        if rc:
            self._check(rc)
        return dict(zip(self._out_names, bufs))

    def _run_flat(self, inputs, out=None, cast: bool = False) -> dict[str, np.ndarray]:
        memo = self._memo
        if memo is not None and self.structure is not None:  # (run() tried the flat call's already)
            done = self._run_again(inputs, out)
            if done is not None:
                return done
        bufs = self._out_buffers(out)
        if self._run_alloc is not None and bufs is None:
            return self._run_managed(inputs, cast)
        if self._cuda or not _WORD_LAYOUT or self._packed or self._strings:
            return self._run_portable(inputs, cast, bufs)
        arrays = self._prepare(inputs, cast)
        sc = self._scratch
        sc.key = None  # the words are rewritten below: _run_again must not trust them until done
        key = tuple([a.shape for a in arrays]) if memo is not None else None
        known = memo.get(key) if memo is not None else None
        iw, ish = sc.iw, sc.ish
        j = m = 0
        for a, tag in zip(arrays, self._in_tags):
            nd = a.ndim
            iw[j] = _data_ptr(a)
            iw[j + 2] = tag | nd
            ish[m:m + nd] = a.shape
            if a.flags.c_contiguous:
                iw[j + 4] = 0
            else:  # a strided view (_prepare let only served ones through): its strides, in elements
                sc.ist[m:m + nd] = _element_strides(a)
                iw[j + 4] = sc.ist_base + 8 * m
            j += _SLOT
            m += _MAX_RANK
        n_in, iaddr = len(arrays), sc.iaddr
        outs = []
        ow, osh = sc.ow, sc.osh
        j = m = 0
        for k, shape in enumerate(self._out_static):
            if known is not None:
                shape = known[k][0]
            elif shape is None:
                rc = self._output_shape_fast(iaddr, n_in, k, sc.tmp_addr)
                if rc:
                    self._check(rc)
                shape = tuple(sc.tmp[:self._out_ranks[k]])
            if bufs is not None and bufs[k] is not None:
                a = as_output(self._out_names[k], self.outputs[k]["dtype"], self._out_np[k], shape, bufs[k],
                              self._strided_out_ok[k])
            elif math.prod(shape) * self._out_np[k].itemsize < self.out_pool.min_bytes:
                a = np.empty(shape, self._out_np[k])  # a small output: malloc keeps its memory (out_pool.py)
            else:
                a = self._empty(k, shape, self._out_np[k])
            nd = len(shape)
            ow[j] = _data_ptr(a)
            ow[j + 2] = self._out_tags[k] | nd
            osh[m:m + nd] = shape
            if a.flags.c_contiguous:
                ow[j + 4] = 0
            else:  # a strided out= view (as_output let only served ones through): its strides, in elements
                st = _element_strides(a)
                assert st is not None  # as_output refused strides that are not whole elements
                sc.ost[m:m + nd] = st
                ow[j + 4] = sc.ost_base + 8 * m
            j += _SLOT
            m += _MAX_RANK
            outs.append(a)
        rc = self._run_fast(iaddr, n_in, sc.oaddr, len(outs))
        if rc:
            self._check(rc)
        if memo is not None:
            if known is None:
                if len(memo) >= MAX_ENTRIES:
                    memo.clear()
                known = memo[key] = tuple((a.shape, a.dtype, a.nbytes) for a in outs)
            if all(a.flags.c_contiguous for a in arrays) and all(a.flags.c_contiguous for a in outs):
                sc.key, sc.outs = key, known  # the words now hold exactly this signature
        if self._any_run_determined:
            outs = [self._trim(k, a) for k, a in enumerate(outs)]
        return dict(zip(self._out_names, outs))

    def _run_managed(self, inputs, cast: bool = False) -> dict[str, np.ndarray]:
        """run() through NAME_run_alloc: the library allocates the outputs in their true
        shapes (known only after the run); numpy views them without a copy."""
        ins = _Tensors(self._prepare(inputs, cast), [t["dtype"] for t in self.inputs])
        held = (ctypes.POINTER(DLManagedTensor) * len(self.outputs))()
        self._check(self._run_alloc(ins.array, len(ins), held, len(self.outputs)))
        blocks = [_ManagedBlock(held[k], self._out_np[k].str) for k in range(len(self.outputs))]
        return {name: np.asarray(b) for name, b in zip(self._out_names, blocks)}

    def _run_portable(self, inputs, cast: bool = False, bufs: list | None = None) -> dict[str, np.ndarray]:
        """run() through _Tensors: CUDA artifacts, and hosts where _WORD_LAYOUT fails."""
        ins = _Tensors(self._prepare(inputs, cast), [t["dtype"] for t in self.inputs])
        outs = []
        for k, t in enumerate(self.outputs):
            shape = self._shape(ins, k)
            if bufs is not None and bufs[k] is not None:
                outs.append(as_output(t["name"], t["dtype"], self._out_np[k], shape, bufs[k],
                                      self._strided_out_ok[k]))
            else:
                outs.append(self._empty(k, shape, np.dtype(DTYPES[t["dtype"]][0])))
        if self._cuda:  # copy to the device, run there, copy back
            from .cuda_device import driver

            drv = driver()
            d_in = [drv.to_device(a) for a in ins.arrays]
            d_out = [drv.empty(a.shape, a.dtype) for a in outs]
            self.run_device(d_in, d_out)
            for a, d in zip(outs, d_out):
                drv.dtoh(a, d.ptr)
            return {t["name"]: a for t, a in zip(self.outputs, outs)}
        o = _Tensors(outs, [t["dtype"] for t in self.outputs], out=True)
        try:
            self._check(self._run(ins.array, len(ins), o.array, len(o)))
            o.unpack()
            return {t["name"]: self._strings_out(k, o.strs[k][0]) if k in o.strs else self._trim(k, a)
                    for k, (t, a) in enumerate(zip(self.outputs, outs))}
        finally:  # the strings were copied out (or the call failed): the library's go
            if self._strings_release is not None:
                self._strings_release()

    def _strings_out(self, k: int, ptrs: np.ndarray) -> np.ndarray:
        """String output k read from its pointers (cut to its true shape first)."""
        ptrs = self._trim(k, ptrs)
        out = np.empty(ptrs.shape, dtype=object)
        str_io.decode(self.outputs[k]["name"], ptrs, out)
        return out

    def _empty(self, k: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
        """Output k's array, from the output pool; an allocation the machine cannot make is
        the caller's error, named."""
        try:
            return self.out_pool.take(shape, dtype)
        except (MemoryError, ValueError) as e:
            nbytes = np.dtype(dtype).itemsize * int(np.prod([int(d) for d in shape], dtype=object))
            raise RuntimeCallError(f'output "{self.outputs[k]["name"]}" of shape {list(shape)} ({nbytes} bytes) '
                                   f"cannot be allocated: {type(e).__name__}", self.codes.get("ERR_ALLOC", 7)) from None

    def _trim(self, k: int, a: np.ndarray) -> np.ndarray:
        """An output with run-determined dims (NAME.h: allocated for the upper bound, valid in
        the leading corner, or compact at the start for run-time symbols bound mid-run) cut
        to the true shape NAME_output_dims reports."""
        if not self.outputs[k].get("run_determined"):
            return a
        if self._output_dims is None:
            self._output_dims = self._fn("output_dims", ctypes.c_int,
                                         [ctypes.c_int, ctypes.POINTER(ctypes.c_int64)])
        shape = (ctypes.c_int64 * max(1, a.ndim))()
        self._check(self._output_dims(k, shape))
        if self.outputs[k].get("run_layout") == "prefix":  # compact in the true shape: a view
            true = tuple(int(shape[j]) for j in range(a.ndim))
            return a.reshape(-1)[:int(np.prod(true, dtype=np.int64))].reshape(true)
        corner = a[tuple(slice(0, int(shape[j])) for j in range(a.ndim))]
        return corner if corner.flags.c_contiguous else np.ascontiguousarray(corner)

    def run_device(self, inputs: list, outputs: list, device_id: int = 0) -> None:
        """Run a CUDA artifact on device buffers (`cuda_device.DeviceArray`s, or anything with
        `ptr`, `shape`, `dtype`, `ndim`) in input / output order; raises on failure."""
        tensors = [_Tensors(list(arrs), [t["dtype"] for t in sigs], (2, device_id), [a.ptr for a in arrs])
                   for arrs, sigs in ((inputs, self.inputs), (outputs, self.outputs))]
        ins, outs = tensors
        self._check(self._run(ins.array, len(ins), outs.array, len(outs)))

    def run_raw(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> int:
        """Call NAME_run on exactly these arrays (no dtype checks or conversion); returns the code.

        Arrays must be C-contiguous; dtypes, ranks and shapes go through as they are, so
        tests can see the C side's own checks.
        """
        for a in [*inputs, *outputs]:
            if not a.flags.c_contiguous:
                raise ValueError("run_raw needs C-contiguous arrays")
        for k, a in enumerate(outputs):
            if not a.flags.writeable:  # e.g. np.frombuffer over bytes: the run would write into them
                raise ValueError(f"run_raw: output {k} is a read-only array")
        ins, outs = _Tensors(list(inputs)), _Tensors(list(outputs))
        return self._run(ins.array, len(ins), outs.array, len(outs))


def load(path: str | os.PathLike, *, out_pool_mb: float | None = None,
         out_pool_blocks: int | None = None) -> CompiledModel:
    """Load an artifact from its directory (holding one NAME.json) or its NAME.json.

    run()'s outputs come from a pool of blocks reused once every array over them is gone
    (out_pool.py): by default the process's shared pool, bounded by ONNXCC_OUT_POOL_MB /
    ONNXCC_OUT_POOL_BLOCKS (else 512 MiB in 16 blocks); `out_pool_mb` / `out_pool_blocks`
    give this model a pool of its own (0 MiB: none)."""
    p = Path(path)
    if p.is_dir():
        found = [m for m in sorted(p.glob("*.json")) if _artifact_meta(m)]
        if len(found) != 1:
            raise FileNotFoundError(f"{p}: expected one artifact NAME.json with its library, "
                                    f"found {len(found)}")
        p = found[0]
    meta = json.loads(p.read_text())
    lib = _library_path(p, meta)
    if not lib.is_file():
        raise FileNotFoundError(f"{p}: library {lib} not found")
    return CompiledModel(meta, lib, from_env(out_pool_mb, out_pool_blocks))


def _library_path(meta_path: Path, meta: dict) -> Path:
    """NAME.json's `library`: a plain file name inside the artifact directory, never a path
    that leads elsewhere (an absolute path, `..`, a symlink out of the directory)."""
    name = meta.get("library", f"lib{meta['name']}.so")
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name
            or "\0" in name):
        raise ArtifactError(f"{meta_path}: library {name!r} must be a file name inside the artifact "
                            "directory")
    lib = meta_path.parent / name
    if lib.resolve().parent != meta_path.parent.resolve():
        raise ArtifactError(f"{meta_path}: library {name!r} resolves outside the artifact directory")
    return lib


def _artifact_meta(path: Path) -> dict | None:
    """The metadata in path if it describes an artifact whose library is beside it."""
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or "name" not in meta or "error_codes" not in meta:
        return None
    try:
        return meta if _library_path(path, meta).is_file() else None
    except ArtifactError:
        return meta  # an artifact all the same: load() reports what is wrong with it
