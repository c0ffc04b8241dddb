"""A caching allocator for the Python loader's output arrays.

Why: a fresh output larger than glibc's largest mmap threshold (32 MiB) is fresh pages on
every call (glibc unmaps a freed large block), and the kernel's first touch of each page
then waits for the OS to clear it: a third of the time of a memory-bound chain on such
outputs (perf: clear_page_erms). onnxruntime's arena keeps its buffers; so does this pool.

An output is a view of a pooled block, a 1-D uint8 array the pool owns. numpy collapses a
view's base to the array that owns the memory, so every view of an output, and every view
of those views, holds a direct reference to the block: the block is free exactly when its
reference count is back to the pool's own. Nothing is handed out while a reference lives
(an output kept in a list, a slice of one, a memoryview, a DLPack capsule); a pointer kept
without its array is not a reference, as with any numpy memory.

Bounds: at most `max_bytes` in at most `max_blocks` blocks. A request that fits no free
block and would pass a bound first drops free blocks (least recently used first) and, if
that is not enough, gets a plain unpooled array. Outputs under `min_bytes` (malloc serves
those from memory it keeps) and object arrays (strings: numpy must fill them with None)
never touch the pool. One lock per pool: two threads calling the same library take
different blocks.

Models loaded with the defaults share one pool per process, bounded by the environment:
ONNXCC_OUT_POOL_MB (0 turns it off), ONNXCC_OUT_POOL_BLOCKS; `load(path, out_pool_mb=...,
out_pool_blocks=...)` gives a model a pool of its own.
"""

from __future__ import annotations

import math
import os
import sys
import threading

import numpy as np

ALIGN = 64
"""byte alignment of every pooled output (a cache line; numpy's own is 16)"""
DEFAULT_MB = 512.0
DEFAULT_BLOCKS = 16
MIN_BYTES = 1 << 20
"""smaller outputs take np.empty: malloc reuses its own memory for them"""
SLACK = 2
"""a free block serves a request of at least 1/SLACK of its size (no huge block pinned by a
small output)"""
# reference counts are what decide reuse: only where they are exact (CPython with its GIL;
# the free-threaded build defers some counts)
_EXACT_REFCOUNTS = sys.implementation.name == "cpython" and getattr(sys, "_is_gil_enabled", lambda: True)()


class _Block:
    __slots__ = ("base", "idle", "nbytes", "offset")

    def __init__(self, nbytes: int):
        #: the owning array; outputs are views of it
        self.base = np.empty(nbytes + ALIGN, np.uint8)
        self.nbytes = nbytes
        self.offset = (-self.base.ctypes.data) % ALIGN
        #: the reference count of `base` while nothing outside the pool holds it
        self.idle = 0


def _refs(block: _Block) -> int:
    return sys.getrefcount(block.base)


class OutPool:
    """Output arrays recycled across calls; `take` is the only entry point of run()."""

    def __init__(self, max_bytes: int, max_blocks: int, min_bytes: int = MIN_BYTES):
        self.max_bytes = max(0, int(max_bytes))
        self.max_blocks = max(0, int(max_blocks))
        self.enabled = _EXACT_REFCOUNTS and self.max_bytes > 0 and self.max_blocks > 0
        # off: no request is large enough (take's one test per call stays the only one)
        self.min_bytes = max(1, int(min_bytes)) if self.enabled else sys.maxsize
        self._blocks: list[_Block] = []  # least recently handed out first
        self._lock = threading.Lock()
        #: counters for tests and benchmarks: outputs served from a kept block, from a new
        #: block, and unpooled because a bound held
        self.hits = self.misses = self.overflows = 0

    @property
    def held_bytes(self) -> int:
        return sum(b.nbytes for b in self._blocks)

    @property
    def num_blocks(self) -> int:
        return len(self._blocks)

    def clear(self) -> None:
        """Drop every block; outputs still alive keep theirs (numpy frees it with them)."""
        with self._lock:
            self._blocks.clear()

    def take(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        """An uninitialised C-contiguous array of `shape` and `dtype`."""
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes < self.min_bytes or dtype.hasobject:
            return np.empty(shape, dtype)
        with self._lock:
            block = self._free_block(nbytes)
            if block is None:
                block = self._new_block(nbytes)
                if block is None:
                    self.overflows += 1
                    return np.empty(shape, dtype)
                self.misses += 1
            else:
                self.hits += 1
            # the view is made under the lock: from here on the block counts as in use
            return block.base[block.offset:block.offset + nbytes].view(dtype).reshape(shape)

    def _free_block(self, nbytes: int) -> _Block | None:
        best = None
        for b in self._blocks:
            if nbytes <= b.nbytes <= SLACK * nbytes and (best is None or b.nbytes < best.nbytes) \
                    and _refs(b) == b.idle:
                best = b
        if best is not None:  # most recently used now: the last to be dropped
            self._blocks.remove(best)
            self._blocks.append(best)
        return best

    def _new_block(self, nbytes: int) -> _Block | None:
        size = -(-nbytes // 4096) * 4096  # whole pages: a later, slightly larger call fits
        if size > self.max_bytes:
            return None
        held = self.held_bytes
        if held + size > self.max_bytes or len(self._blocks) >= self.max_blocks:
            for b in [b for b in self._blocks if _refs(b) == b.idle]:  # oldest first
                self._blocks.remove(b)
                held -= b.nbytes
                if held + size <= self.max_bytes and len(self._blocks) < self.max_blocks:
                    break
            if held + size > self.max_bytes or len(self._blocks) >= self.max_blocks:
                return None
        try:
            block = _Block(size)
        except MemoryError:
            return None
        block.idle = _refs(block)
        self._blocks.append(block)
        return block


_SHARED: dict[tuple[int, int], OutPool] = {}
_SHARED_LOCK = threading.Lock()


def from_env(max_mb: float | None = None, max_blocks: int | None = None) -> OutPool:
    """The pool load() gives a model. With no argument, the process's shared pool for the
    bounds ONNXCC_OUT_POOL_MB / ONNXCC_OUT_POOL_BLOCKS give (else 512 MiB, 16 blocks): every
    model loaded so shares one bound, however many are loaded (a JIT session's versions, a
    test suite's models). With either argument, a pool of the model's own."""
    own = max_mb is not None or max_blocks is not None
    if max_mb is None:
        max_mb = _env_number("ONNXCC_OUT_POOL_MB", DEFAULT_MB)
    if max_blocks is None:
        max_blocks = int(_env_number("ONNXCC_OUT_POOL_BLOCKS", DEFAULT_BLOCKS))
    if max_mb < 0 or max_blocks < 0:
        raise ValueError(f"output pool bounds must be >= 0, got {max_mb} MiB and {max_blocks} blocks")
    key = (int(max_mb * (1 << 20)), max_blocks)
    if own:
        return OutPool(*key)
    with _SHARED_LOCK:
        pool = _SHARED.get(key)
        if pool is None:
            pool = _SHARED[key] = OutPool(*key)
        return pool


def _env_number(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected a number") from None
