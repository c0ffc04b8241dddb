"""An onnxruntime-style front door: `onnxcc.InferenceSession(path).run(None, feeds)`.

For a user switching from onnxruntime with one line. The model is compiled through the
artifact cache on construction (once per model and flags), then every `run` calls the built
library. onnxruntime's `sess_options` and `providers` arguments are accepted so existing
calls keep working; they select nothing here (onnxcc runs on the CPU it compiled for), and
compile flags go in as keyword arguments (`dims={"seq": (1, 2048)}`, `specialize=...`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import OnnxccError

#: onnxcc dtype names -> onnxruntime's type strings
_ORT_TYPES = {"f16": "tensor(float16)", "bf16": "tensor(bfloat16)", "f32": "tensor(float)",
              "f64": "tensor(double)", "i8": "tensor(int8)", "i16": "tensor(int16)", "i32": "tensor(int32)",
              "i64": "tensor(int64)", "u8": "tensor(uint8)", "u16": "tensor(uint16)", "u32": "tensor(uint32)",
              "u64": "tensor(uint64)", "bool": "tensor(bool)", "f8e4m3fn": "tensor(float8e4m3fn)",
              "f8e4m3fnuz": "tensor(float8e4m3fnuz)", "f8e5m2": "tensor(float8e5m2)",
              "f8e5m2fnuz": "tensor(float8e5m2fnuz)", "f8e8m0": "tensor(float8e8m0)", "f4e2m1": "tensor(float4e2m1)",
              "i4": "tensor(int4)", "u4": "tensor(uint4)", "i2": "tensor(int2)", "u2": "tensor(uint2)"}


@dataclass(frozen=True)
class NodeArg:
    """What onnxruntime's `get_inputs()` / `get_outputs()` give: name, shape, type.
    Static dims are ints, symbolic ones their expression as text (`"batch"`, `"seq + 1"`)."""

    name: str
    shape: list
    type: str


def _node_arg(sig: dict) -> NodeArg:
    shape = [d if isinstance(d, int) else (int(d) if str(d).isdigit() else str(d)) for d in sig["shape"]]
    return NodeArg(sig["name"], shape, _ORT_TYPES.get(sig["dtype"], sig["dtype"]))


class InferenceSession:
    """Compile `model` (a path, serialized bytes or an onnx.ModelProto) and serve it like
    onnxruntime.InferenceSession."""

    def __init__(self, model, sess_options=None, providers=None, provider_options=None, *,
                 cache_dir: str | Path | None = None, **compile_options):
        from .compiler import CompileOptions, compile_cached
        from .runtime import load
        from .runtime.cache import ArtifactCache

        if hasattr(model, "SerializeToString"):
            model = model.SerializeToString()
        elif not isinstance(model, bytes):
            model = Path(model)
            if not model.is_file():
                raise OnnxccError(f"{model}: no such file")
        try:
            options = CompileOptions(**compile_options)
        except TypeError as e:
            raise OnnxccError(f"InferenceSession: {e}") from None
        self.artifact_dir, self.cached = compile_cached(model, options, ArtifactCache(cache_dir))
        self._model = load(self.artifact_dir)

    def get_inputs(self) -> list[NodeArg]:
        return [_node_arg(t) for t in self._model.inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [_node_arg(t) for t in self._model.outputs]

    def get_providers(self) -> list[str]:
        return ["onnxcc"]

    def run(self, output_names, input_feed: dict, run_options=None) -> list[np.ndarray]:
        """Outputs in the order of `output_names` (None: all, in the model's order)."""
        outs = self._model.run(dict(input_feed))
        names = list(outs) if output_names is None else list(output_names)
        unknown = [n for n in names if n not in outs]
        if unknown:
            raise OnnxccError(f"run: the model has no output {', '.join(map(repr, unknown))} "
                              f"(its outputs: {', '.join(outs)})")
        return [outs[n] for n in names]
