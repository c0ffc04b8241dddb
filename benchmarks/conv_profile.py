"""Per-layer profile of a conv net's convolutions, onnxcc against onnxruntime.

Each Conv of the model (with the Clip / Relu that follows it, when that is its only
consumer) becomes a one-layer model with symbolic batch, H and W; equal layers are built
once. Every layer is compiled once and timed side by side with onnxruntime
(`compare_ort.bench_pair`, CPU seconds by default: single-thread rows on a shared machine)
at the shape it sees when the whole model runs at each --size and --batch. Rows are sorted
by onnxcc's time, with the share of onnxcc's summed layer time, so the largest losses come
first.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/conv_profile.py \\
        tests/zoo/models/mobilenet_v2_ts13.onnx --size 224 --batch 1 [--only 1x1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def _layers(path: Path, size: int) -> list[dict]:
    """The model's convs: attributes, weights, the activation after each, input shape at `size`."""
    import onnx
    from onnx import helper, numpy_helper, shape_inference

    m = onnx.load(str(path))
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    consts = {n.output[0]: n.attribute[0].t for n in g.node if n.op_type == "Constant" and n.attribute}
    alias = {n.output[0]: n.input[0] for n in g.node if n.op_type == "Identity"}

    def tensor(name: str):
        while name in alias:
            name = alias[name]
        return inits.get(name) or consts.get(name)

    x = g.input[0]
    c = x.type.tensor_type.shape.dim[1].dim_value
    fixed = onnx.ModelProto()
    fixed.CopyFrom(m)
    del fixed.graph.input[:]
    fixed.graph.input.append(helper.make_tensor_value_info(x.name, onnx.TensorProto.FLOAT, [1, c, size, size]))
    inferred = shape_inference.infer_shapes(fixed)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*inferred.graph.value_info, *inferred.graph.input]}
    users: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    out = []
    for n in g.node:
        if n.op_type != "Conv":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        w = numpy_helper.to_array(tensor(n.input[1]))
        bias = numpy_helper.to_array(tensor(n.input[2])) if len(n.input) > 2 and n.input[2] else None
        act = None
        u = users.get(n.output[0], [])
        if len(u) == 1 and u[0].op_type in ("Relu", "Clip"):
            act = u[0].op_type
        out.append({"name": n.name or n.output[0], "attrs": attrs, "w": w, "b": bias, "act": act,
                    "in": shapes[n.input[0]]})
    return out


def _kind(layer: dict) -> str:
    w, a = layer["w"], layer["attrs"]
    s = a.get("strides", [1, 1])[0]
    if a.get("group", 1) > 1 and a.get("group", 1) == layer["in"][1]:
        return f"dw{w.shape[2]}x{w.shape[3]}s{s}"
    return f"{w.shape[2]}x{w.shape[3]}s{s}"


def _layer_model(layer: dict, path: Path) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(layer["w"], "w")]
    ins = ["x", "w"]
    if layer["b"] is not None:
        inits.append(numpy_helper.from_array(layer["b"], "b"))
        ins.append("b")
    nodes = [helper.make_node("Conv", ins, ["y"], **layer["attrs"])]
    out = "y"
    if layer["act"] == "Relu":
        nodes.append(helper.make_node("Relu", ["y"], ["z"]))
        out = "z"
    elif layer["act"] == "Clip":
        inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"),
                  numpy_helper.from_array(np.array(6, np.float32), "hi")]
        nodes.append(helper.make_node("Clip", ["y", "lo", "hi"], ["z"]))
        out = "z"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", layer["in"][1], "H", "W"])
    y = helper.make_tensor_value_info(out, TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "layer", [x], [y], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--size", type=int, action="append", help="model input H = W (repeatable)")
    ap.add_argument("--batch", type=int, action="append", help="batch (repeatable)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--only", default="", help="comma list of layer kinds: 1x1s1, dw3x3s2, 3x3s2 ...")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ["ONNXCC_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import numpy as np
    import onnxruntime as ort
    from compare_ort import bench_pair

    import onnxcc

    sizes, batches = args.size or [224], args.batch or [1]
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    only = set(filter(None, args.only.split(",")))
    # equal layers (weights' shape, attrs, activation) are one model; its shapes per size
    groups: dict[tuple, dict] = {}
    for size in sizes:
        for layer in _layers(args.model, size):
            if only and _kind(layer) not in only:
                continue
            key = (layer["w"].shape, repr(sorted(layer["attrs"].items())), layer["act"], layer["b"] is not None)
            gr = groups.setdefault(key, {"layer": layer, "count": {}, "shapes": set()})
            hw = tuple(layer["in"][2:])
            gr["count"][(size, hw)] = gr["count"].get((size, hw), 0) + 1
            gr["shapes"].add((size, hw))
    rows = []
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        for k, gr in enumerate(groups.values()):
            layer = gr["layer"]
            p = Path(tmp) / f"l{k}.onnx"
            _layer_model(layer, p)
            onnxcc.compile(p, Path(tmp) / f"l{k}")
            lib = onnxcc.load(Path(tmp) / f"l{k}")
            sess = ort.InferenceSession(str(p), so, providers=["CPUExecutionProvider"])
            for size, hw in sorted(gr["shapes"]):
                for bt in batches:
                    x = (rng.standard_normal((bt, layer["in"][1], *hw)) * 0.5).astype(np.float32)
                    ours = next(iter(lib.run({"x": x}).values()))
                    theirs = sess.run(None, {"x": x})[0]
                    err = float(np.max(np.abs(ours - theirs)))
                    t_cc, t_ort = bench_pair(lambda: lib.run({"x": x}), lambda: sess.run(None, {"x": x}),
                                             args.repeats, budget_s=0.6, clock=clock)
                    n = gr["count"][(size, hw)]
                    w = layer["w"].shape
                    rows.append({"kind": _kind(layer), "cout": w[0], "cin": layer["in"][1], "hw": hw, "size": size,
                                 "batch": bt, "count": n, "cc_ms": t_cc * 1e3 * n, "ort_ms": t_ort * 1e3 * n,
                                 "ratio": t_cc / t_ort, "err": err, "version": lib.last_version})
    for size in sizes:
        for bt in batches:
            sel = sorted((r for r in rows if r["size"] == size and r["batch"] == bt), key=lambda r: -r["cc_ms"])
            tot_cc = sum(r["cc_ms"] for r in sel)
            tot_ort = sum(r["ort_ms"] for r in sel)
            print(f"\nsize {size} batch {bt}: onnxcc {tot_cc:.3f} ms, ort {tot_ort:.3f} ms, "
                  f"ratio {tot_cc / max(tot_ort, 1e-9):.3f} (sums over the layers, x count)")
            by_kind: dict[str, list[float]] = {}
            for r in sel:
                by_kind.setdefault(r["kind"], [0.0, 0.0])
                by_kind[r["kind"]][0] += r["cc_ms"]
                by_kind[r["kind"]][1] += r["ort_ms"]
            for kd, (a, b) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
                print(f"  {kd:10s} onnxcc {a:8.3f} ms  ort {b:8.3f} ms  ratio {a / max(b, 1e-9):.3f}")
            for r in sel:
                hw = f"{r['hw'][0]}x{r['hw'][1]}"
                print(f"  {r['kind']:10s} {r['cin']:5d}->{r['cout']:<5d} {hw:9s} x{r['count']}  "
                      f"onnxcc {r['cc_ms']:7.3f}  ort {r['ort_ms']:7.3f}  ratio {r['ratio']:5.2f}  "
                      f"share {r['cc_ms'] / max(tot_cc, 1e-9):5.1%}  err {r['err']:.1e}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
