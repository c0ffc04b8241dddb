"""A generic C driver for any compiled artifact, for tests that call libNAME.so from C.

`build_c_runner(artifact_dir)` writes and compiles a small C program that includes NAME.h,
reads each input from a raw file whose shape is given on the command line, allocates the
outputs from `NAME_output_shape`, calls `NAME_run` and writes each output to a raw file.
It prints `version=V` (from `NAME_last_version`) or the error code and message.

    runner IN0.bin RANK D0 D1 ... [IN1.bin RANK ...] -- OUT0.bin [OUT1.bin ...]
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np

from onnxcc.runtime.loader import DTYPES, pack_subbyte, unpack_subbyte

_DL = {"f32": ("kDLFloat", 32), "f64": ("kDLFloat", 64), "f16": ("kDLFloat", 16), "i64": ("kDLInt", 64),
       "i32": ("kDLInt", 32), "i8": ("kDLInt", 8), "u8": ("kDLUInt", 8), "bool": ("kDLBool", 8),
       "bf16": ("kDLBfloat", 16),
       # the small types: DLPack 1.1's float8 / float4 codes; sub-byte tensors travel packed
       "f8e4m3fn": (10, 8), "f8e4m3fnuz": (11, 8), "f8e5m2": (12, 8), "f8e5m2fnuz": (13, 8), "f8e8m0": (14, 8),
       "f4e2m1": (17, 4), "i4": ("kDLInt", 4), "u4": ("kDLUInt", 4), "i2": ("kDLInt", 2), "u2": ("kDLUInt", 2)}

#: what the C tests that probe for memory errors compile with (address + undefined behaviour,
#: stopping at the first report)
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]


C_F32_TENSOR = r"""
/* a compact f32 DLTensor over host memory (needs <string.h> and an artifact's header) */
static DLTensor tensor(float *data, int ndim, int64_t *shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data; t.device.device_type = kDLCPU; t.ndim = ndim;
  t.dtype.code = kDLFloat; t.dtype.bits = 32; t.dtype.lanes = 1; t.shape = shape;
  return t;
}
"""
"""C text the tests' inline drivers paste in after their includes: `tensor(data, ndim, shape)`."""


def sanitizers_available(flags: list[str] = SANITIZE) -> bool:
    """Whether `cc` links a program with `flags` (distributions ship the sanitizer runtimes
    separately)."""
    cc = shutil.which("cc")
    if cc is None:
        return False
    r = subprocess.run([cc, *flags, "-x", "c", "-", "-o", "/dev/null"], input="int main(void){return 0;}",
                       capture_output=True, text=True)
    return r.returncode == 0


_TEMPLATE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "@NAME@.h"

static const int IN_CODE[] = {@IN_CODES@}, IN_BITS[] = {@IN_BITS@};
static const int OUT_CODE[] = {@OUT_CODES@}, OUT_BITS[] = {@OUT_BITS@}, OUT_RANK[] = {@OUT_RANKS@};

static void *read_file(const char *path, size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  FILE *f = fopen(path, "rb");
  if (!f || fread(p, 1, bytes, f) != bytes) { fprintf(stderr, "cannot read %s\n", path); exit(20); }
  fclose(f);
  return p;
}

int main(int argc, char **argv) {
  DLTensor in[@NIN@ + 1], out[@NOUT@ + 1];
  int64_t in_shape[@NIN@ + 1][8], out_shape[@NOUT@ + 1][8];
  int a = 1;
  memset(in, 0, sizeof in); memset(out, 0, sizeof out);
  for (int k = 0; k < @NIN@; k++) {
    const char *path = argv[a++];
    int rank = atoi(argv[a++]);
    size_t n = 1;
    for (int j = 0; j < rank; j++) { in_shape[k][j] = atoll(argv[a++]); n *= (size_t)in_shape[k][j]; }
    in[k].data = read_file(path, (n * (size_t)IN_BITS[k] + 7) / 8); /* sub-byte types: packed */
    in[k].device.device_type = kDLCPU; in[k].ndim = rank; in[k].shape = in_shape[k];
    in[k].dtype.code = (uint8_t)IN_CODE[k]; in[k].dtype.bits = (uint8_t)IN_BITS[k]; in[k].dtype.lanes = 1;
  }
  a++; /* "--" */
  for (int k = 0; k < @NOUT@; k++) {
    int rc = @NAME@_output_shape(in, @NIN@, k, out_shape[k]);
    if (rc) { printf("error rc=%d %s\n", rc, @NAME@_last_error()); return 0; }
    size_t n = 1;
    for (int j = 0; j < OUT_RANK[k]; j++) n *= (size_t)out_shape[k][j];
    out[k].data = calloc(n ? (n * (size_t)OUT_BITS[k] + 7) / 8 : 1, 1);
    out[k].device.device_type = kDLCPU; out[k].ndim = OUT_RANK[k]; out[k].shape = out_shape[k];
    out[k].dtype.code = (uint8_t)OUT_CODE[k]; out[k].dtype.bits = (uint8_t)OUT_BITS[k]; out[k].dtype.lanes = 1;
  }
  int rc = @NAME@_run(in, @NIN@, out, @NOUT@);
  if (rc) { printf("error rc=%d %s\n", rc, @NAME@_last_error()); return 0; }
  for (int k = 0; k < @NOUT@; k++) {
    size_t n = 1;
    for (int j = 0; j < OUT_RANK[k]; j++) n *= (size_t)out_shape[k][j];
    FILE *f = fopen(argv[a + k], "wb");
    fwrite(out[k].data, 1, (n * (size_t)OUT_BITS[k] + 7) / 8, f);
    fclose(f);
  }
  printf("version=%d\n", @NAME@_last_version());
  return 0;
}
"""


def build_c_runner(artifact_dir: str | Path) -> Path:
    d = Path(artifact_dir)
    meta = json.loads(next(p for p in d.glob("*.json") if p.name != "MANIFEST.json").read_text())
    name = meta["name"]
    ins, outs = meta["inputs"], meta["outputs"]

    def codes(ts, i):
        return ", ".join(str(_DL[t["dtype"]][i]) for t in ts) or "0"

    src = (_TEMPLATE.replace("@NAME@", name).replace("@NIN@", str(len(ins))).replace("@NOUT@", str(len(outs)))
           .replace("@IN_CODES@", codes(ins, 0)).replace("@IN_BITS@", codes(ins, 1))
           .replace("@OUT_CODES@", codes(outs, 0)).replace("@OUT_BITS@", codes(outs, 1))
           .replace("@OUT_RANKS@", ", ".join(str(len(t["shape"])) for t in outs) or "0"))
    (d / "c_runner.c").write_text(src)
    exe = d / "c_runner"
    subprocess.run(["cc", "-O1", "-o", str(exe), str(d / "c_runner.c"), f"-I{d}", f"-L{d}", f"-l{name}",
                    f"-Wl,-rpath,{d}"], check=True, capture_output=True, text=True)
    return exe


def run_c(exe: Path, meta_outputs: list[dict], feeds: list[np.ndarray], work: Path) -> tuple[str, list]:
    """Run the C runner on `feeds`; returns (its stdout line, output arrays or [] on error)."""
    args = [str(exe)]
    for k, a in enumerate(feeds):
        p = work / f"in{k}.bin"
        bits = _SUB_BYTE.get(a.dtype, 8)
        (pack_subbyte(a, bits) if bits < 8 else np.ascontiguousarray(a)).tofile(p)
        args += [str(p), str(a.ndim), *[str(s) for s in a.shape]]
    args.append("--")
    out_paths = [work / f"out{k}.bin" for k in range(len(meta_outputs))]
    args += [str(p) for p in out_paths]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"C runner failed ({r.returncode}): {r.stdout}{r.stderr}")
    line = r.stdout.strip()
    if not line.startswith("version="):
        return line, []
    return line, [_read_output(p, t["dtype"]) for p, t in zip(out_paths, meta_outputs, strict=True)]


#: numpy dtype -> bits, of the sub-byte types (whose files are packed)
_SUB_BYTE = {np.dtype(t): bits for t, _, bits in DTYPES.values() if bits < 8}


def _read_output(path: Path, dt: str) -> np.ndarray:
    """An output file as a flat array; sub-byte types unpacked (the file's trailing bits of
    the last byte are padding, so the count comes from the size and is trimmed by the caller)."""
    bits = _DL[dt][1]
    if bits >= 8:
        return np.fromfile(path, dtype=_np(dt))
    raw = np.fromfile(path, dtype=np.uint8)
    out = np.empty(raw.size * (8 // bits), _np(dt))
    unpack_subbyte(raw, out, bits)
    return out


def _np(dt: str):
    return DTYPES[dt][0]


def run_sanitized_driver(tmp: Path, models: dict[str, Path], source: Path) -> tuple[list[str], dict[str, Path]]:
    """Compile each model (library name -> .onnx path) into tmp/NAME, with the sanitizers where
    they work, build the C driver `source` against all of them and run it on one thread.
    Asserts a clean run (exit 0, no sanitizer report, the last line DONE) and returns the
    driver's other stdout lines and the artifact directories."""
    import onnxcc

    flags = SANITIZE if sanitizers_available() else []
    cc = " ".join(["cc", *flags])
    dirs = {}
    for name, path in models.items():
        dirs[name] = tmp / name
        onnxcc.compile(path, dirs[name], name=name, cc=cc)
    exe = tmp / source.stem
    libs = [a for name, d in dirs.items() for a in (f"-I{d}", f"-L{d}", f"-l{name}")]
    subprocess.run(["cc", "-O1", "-g", *flags, "-o", str(exe), str(source), *libs, "-lm",
                    f"-Wl,-rpath,{':'.join(str(d) for d in dirs.values())}"], check=True)
    env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0", "UBSAN_OPTIONS": "print_stacktrace=1",
           "PATH": "/usr/bin:/bin", "ONNXCC_NUM_THREADS": "1"}
    r = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, f"driver failed (rc {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    assert "runtime error" not in r.stderr and "Sanitizer" not in r.stderr, r.stderr[-4000:]
    lines = r.stdout.splitlines()
    assert lines and lines[-1] == "DONE", lines
    return lines[:-1], dirs


def driver_rows(lines: list[str], keys: tuple[str, ...]) -> dict[str, tuple]:
    """A C driver's report lines, `NAME k1=<int> k2=<int> ... msg=<text>`, by NAME: the ints
    of `keys` in that order, then the message (the rest of the line after `msg=`)."""
    rows = {}
    for ln in lines:
        name, rest = ln.split(" ", 1)
        ints = (int(rest.split(f"{k}=", 1)[1].split()[0]) for k in keys)
        rows[name] = (*ints, rest.split("msg=", 1)[1])
    return rows


def relu_mul_add_model(path: Path, graph_name: str = "st") -> Path:
    """Save y = Relu(a) * b + a (a: f32[N, 4], b: f32[4]), the stride and alias tests' model:
    one writer per element reading a only at that element, so y may be written over a."""
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Mul", ["r", "b"], ["m"]),
                           helper.make_node("Add", ["m", "a"], ["y"])], graph_name,
                          [vi("a", TensorProto.FLOAT, ["N", 4]), vi("b", TensorProto.FLOAT, [4])],
                          [vi("y", TensorProto.FLOAT, ["N", 4])])
    return save_graph(g, path)


def save_graph(g, path: Path) -> Path:
    """Save the graph `g` as a model (opset 17, ir_version 8) at `path`; -> `path`."""
    import onnx
    from onnx import helper

    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path
