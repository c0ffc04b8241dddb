"""runtime.out_pool: output blocks reused across calls, never while an array over them lives."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxcc.runtime.out_pool import ALIGN, OutPool, from_env

F32 = np.dtype(np.float32)


def pool(blocks: int = 4, mb: float = 1.0) -> OutPool:
    return OutPool(int(mb * (1 << 20)), blocks, min_bytes=1)


def test_released_block_is_reused_and_aligned():
    p = pool()
    a = p.take((64, 32), F32)
    assert a.shape == (64, 32) and a.dtype == F32 and a.flags.c_contiguous and a.flags.writeable
    assert a.ctypes.data % ALIGN == 0
    ptr = a.ctypes.data
    del a
    b = p.take((64, 32), F32)
    assert b.ctypes.data == ptr and (p.hits, p.misses) == (1, 1)
    # a smaller request takes the same block (within the slack), a much smaller one does not
    del b
    c = p.take((48, 32), F32)
    assert c.ctypes.data == ptr
    d = p.take((4, 32), F32)
    assert not np.shares_memory(c, d)


@pytest.mark.parametrize("keep", [
    lambda a: a,                          # the output itself
    lambda a: a[3:9, ::2],                # a view
    lambda a: a.reshape(-1)[5:].view(np.int32),  # a view of a view, reinterpreted
    lambda a: [a[0], a[1]],               # rows in a list
    lambda a: memoryview(a),              # a buffer
    lambda a: np.from_dlpack(a),          # a DLPack consumer
])
def test_live_output_is_never_handed_out(keep):
    p = pool()
    a = p.take((64, 32), F32)
    a[...] = 7.0
    held = keep(a)
    del a
    for _ in range(3):
        b = p.take((64, 32), F32)
        b[...] = -1.0
        arrays = held if isinstance(held, list) else [np.asarray(held)]
        assert all(not np.shares_memory(h, b) for h in arrays)
        assert all(np.all(h.view(F32) == 7.0) for h in arrays)


def test_outputs_stored_in_a_list_stay_intact():
    p = pool(blocks=8, mb=4)
    kept = []
    for i in range(6):
        a = p.take((1000,), F32)
        a[...] = i
        kept.append(a)
    assert [float(a[0]) for a in kept] == [0, 1, 2, 3, 4, 5]
    assert all(np.all(a == i) for i, a in enumerate(kept))
    assert p.num_blocks == 6 and p.hits == 0
    kept.pop(2)
    b = p.take((1000,), F32)  # the released block is the only free one
    assert p.hits == 1 and not any(np.shares_memory(b, a) for a in kept)


def test_bounds_hold():
    block = 256 * 1024  # bytes of one request, whole pages
    p = OutPool(max_bytes=3 * block, max_blocks=8, min_bytes=1)
    live = [p.take((block // 4,), F32) for _ in range(5)]
    assert p.num_blocks == 3 and p.held_bytes <= 3 * block and p.overflows == 2
    assert len({a.ctypes.data for a in live}) == 5  # the overflow arrays are plain numpy ones
    p2 = OutPool(max_bytes=64 * block, max_blocks=2, min_bytes=1)
    live2 = [p2.take((block // 4,), F32) for _ in range(3)]
    assert p2.num_blocks == 2 and p2.overflows == 1
    # free blocks too small for a new request are dropped to make room (oldest first)
    del live, live2
    big = p.take((3 * block // 4,), F32)
    assert p.num_blocks == 1 and p.held_bytes == 3 * block and big.size == 3 * block // 4
    p.clear()
    assert p.num_blocks == 0 and big.sum() is not None  # a cleared pool leaves live arrays alone


def test_small_empty_object_and_disabled_requests_bypass():
    p = OutPool(1 << 20, 4)  # default minimum size
    for shape, dt in (((10,), F32), ((0, 5000000), F32), ((300000,), np.dtype(object))):
        a = p.take(shape, dt)
        assert a.shape == shape and a.dtype == dt
    assert (p.hits, p.misses, p.num_blocks) == (0, 0, 0)
    assert p.take((300000,), np.dtype(object))[0] is None  # numpy's own fill
    off = OutPool(0, 4, min_bytes=1)
    assert not off.enabled and off.take((4,), F32).shape == (4,) and off.num_blocks == 0


def test_threads_never_share_a_block():
    p = pool(blocks=6, mb=1)
    errors = []

    def work(tid: int) -> None:
        for i in range(200):
            a = p.take((16, 64), F32)
            a[...] = tid * 1000 + i
            b = p.take((16, 64), F32)
            b[...] = -tid
            if not (np.all(a == tid * 1000 + i) and np.all(b == -tid)):
                errors.append((tid, i))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and p.num_blocks <= 6 and p.hits > 0


def test_config_from_arguments_and_env(monkeypatch):
    monkeypatch.setenv("ONNXCC_OUT_POOL_MB", "0")
    assert not from_env().enabled
    assert from_env(8, 3).max_bytes == 8 << 20 and from_env(8, 3).max_blocks == 3
    monkeypatch.setenv("ONNXCC_OUT_POOL_MB", "lots")
    with pytest.raises(ValueError, match="ONNXCC_OUT_POOL_MB='lots'"):
        from_env()
    monkeypatch.delenv("ONNXCC_OUT_POOL_MB")
    monkeypatch.setenv("ONNXCC_OUT_POOL_BLOCKS", "2")
    assert from_env().max_blocks == 2 and from_env().enabled
    # the defaults give every model the process's one pool; arguments give a model its own
    assert from_env() is from_env() and from_env(8) is not from_env(8)
    with pytest.raises(ValueError, match="must be >= 0"):
        from_env(-1)


@pytest.fixture(scope="module")
def silu(tmp_path_factory):
    """SiLU over [N, 768]: at N = 512 each output is 1.5 MiB, above the pool's minimum."""
    import onnxcc

    d = tmp_path_factory.mktemp("silu")
    g = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
                          "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 768])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 768])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(m, d / "silu.onnx")
    onnxcc.compile(d / "silu.onnx", d / "art")
    return d


def test_model_outputs_pooled_and_correct(silu):
    import onnxruntime as ort

    from onnxcc.runtime import load

    lib = load(silu / "art", out_pool_mb=512)  # a pool of its own: counters no other test touches
    assert load(silu / "art").out_pool is load(silu / "art").out_pool  # the default: the shared one
    sess = ort.InferenceSession(str(silu / "silu.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = [rng.standard_normal((512, 768)).astype(np.float32) for _ in range(4)]
    want = [np.asarray(sess.run(None, {"x": x})[0]) for x in feeds]
    kept = [lib.run({"x": x})["y"] for x in feeds]  # every result kept: four blocks
    views = [lib.run({"x": x})["y"][::3] for x in feeds]  # only views kept: four more
    assert lib.out_pool.num_blocks == 8 and lib.out_pool.hits == 0
    for y, v, w in zip(kept, views, want, strict=True):
        np.testing.assert_allclose(y, w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(v, w[::3], rtol=1e-5, atol=1e-6)
    del kept, views
    for x, w in zip(feeds, want, strict=True):  # released: every call reuses a block
        np.testing.assert_allclose(lib.run({"x": x})["y"], w, rtol=1e-5, atol=1e-6)
    assert lib.out_pool.hits == 4 and lib.out_pool.num_blocks == 8
    # an output fed back as the next input is alive during that call: never its output block
    y1 = lib.run({"x": feeds[0]})["y"]
    y2 = lib.run({"x": y1})["y"]
    assert not np.shares_memory(y1, y2)
    np.testing.assert_allclose(y1, want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y2, np.asarray(sess.run(None, {"x": want[0]})[0]), rtol=1e-5, atol=1e-6)
    del y1, y2
    # out= is written in place and never touches the pool
    buf = np.empty((512, 768), np.float32)
    assert lib.run({"x": feeds[0]}, out={"y": buf})["y"] is buf and lib.out_pool.hits == 6
    np.testing.assert_allclose(buf, want[0], rtol=1e-5, atol=1e-6)
    # off: plain arrays
    off = load(silu / "art", out_pool_mb=0)
    np.testing.assert_allclose(off.run({"x": feeds[1]})["y"], want[1], rtol=1e-5, atol=1e-6)
    assert off.out_pool.num_blocks == 0


def test_model_threads_keep_their_outputs(silu):
    from concurrent.futures import ThreadPoolExecutor

    from onnxcc.runtime import load

    lib = load(silu / "art", out_pool_blocks=4)
    x = np.linspace(-4, 4, 512 * 768, dtype=np.float32).reshape(512, 768)
    ref = x / (1 + np.exp(-x.astype(np.float64)))

    def work(k: int) -> bool:
        outs = [lib.run({"x": x * (1 + k % 2)})["y"] for _ in range(3)]  # held across calls
        want = ref if k % 2 == 0 else 2 * x / (1 + np.exp(-2 * x.astype(np.float64)))
        return all(np.allclose(y, want, rtol=1e-5, atol=1e-5) for y in outs)

    with ThreadPoolExecutor(4) as ex:
        assert all(ex.map(work, range(8)))
    assert lib.out_pool.num_blocks <= 4
