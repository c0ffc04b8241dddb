"""Versions whose kernel program and memory plan coincide (kernel/fingerprint.py) are emitted
and compiled once: the later version's entry is a stub calling the earlier one's
(codegen/cpu/backend.py `_twins`, dedup.py `forward_version`), and the dispatcher still
picks each version by its own guard. The transformer sample's `seq % 16 == 0` version
lowers exactly as its generic one does."""

from __future__ import annotations

import copy
import dataclasses
import re

import numpy as np
import pytest

import onnxcc
from onnxcc.codegen.backend import make_backend
from onnxcc.compiler import CompileOptions, load_module
from onnxcc.compiler.pipeline import build_pipeline
from onnxcc.kernel.fingerprint import version_key, version_twins
from onnxcc.kernel.program import Compute
from onnxcc.passes import PassContext, run_pipeline
from onnxcc.testing import MODELS_DIR
from tests.e2e.compiled_model import assert_matches_onnxruntime

MODEL = MODELS_DIR / "transformer.onnx"


@pytest.fixture(scope="module")
def kmod():
    options = CompileOptions()
    module = load_module(MODEL)
    return run_pipeline(module, build_pipeline(options, make_backend(options), "transformer", "kernel"), PassContext())


def test_the_samples_divisible_version_is_a_twin_of_the_generic_one(kmod):
    assert [str(v.function.guard) for v in kmod.versions][-1] == "True"
    assert version_twins(kmod.versions) == {1: 0}


def test_any_difference_the_emitter_could_read_keeps_versions_apart(kmod):
    v0 = kmod.versions[0]
    key = version_key(v0.program, v0.plan)
    assert key is not None and key == version_key(kmod.versions[1].program, kmod.versions[1].plan)

    # a schedule's field (the vector width): not in the program's text, still in the key
    prog = copy.deepcopy(v0.program)
    k, c = next((k, s) for k, s in enumerate(prog.body) if isinstance(s, Compute) and s.schedule is not None)
    wider = dataclasses.replace(c.schedule, vector_width=2 * (c.schedule.vector_width or 1))
    prog.body[k] = dataclasses.replace(c, schedule=wider)
    assert str(prog) == str(v0.program)
    assert version_key(prog, v0.plan) != key

    # one weight value
    prog = copy.deepcopy(v0.program)
    buf = next(b for b in prog.buffers.values() if b.kind == "const" and b.data is not None and b.data.size > 1)
    data = buf.data.copy()
    data.flat[0] += 1
    prog.buffers[buf.name] = dataclasses.replace(buf, data=data)
    assert version_key(prog, v0.plan) != key

    # a workspace offset of the plan
    plan = copy.deepcopy(v0.plan)
    name = next(iter(plan.offsets))
    plan.offsets[name] = plan.offsets[name] + 64
    assert version_key(v0.program, plan) != key


def test_what_the_key_cannot_write_down_shares_nothing(kmod):
    prog = copy.deepcopy(kmod.versions[0].program)
    prog.body[0].__dict__["hook"] = lambda: 0  # a closure may hold anything
    assert version_key(prog, kmod.versions[0].plan) is None


def test_one_body_in_the_llvm_module_and_the_twin_entry_forwards(tmp_path):
    text = onnxcc.compile(MODEL, tmp_path, emit="llvm").text
    defined = re.findall(r'^define [^@]*@"([^"]+)"', text, re.MULTILINE)
    assert "transformer_v0" in defined and "transformer_v1" in defined
    assert any(n.startswith("transformer_v0.") for n in defined)
    assert not [n for n in defined if n.startswith("transformer_v1.")]  # without twins: 9 bodies
    stub = text[text.index('@"transformer_v1"('):]
    stub = stub[:stub.index("}")]
    assert 'tail call i32 @"transformer_v0"' in stub


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    out = tmp_path_factory.mktemp("twins")
    onnxcc.compile(MODEL, out)
    return onnxcc.load(out)


@pytest.mark.parametrize("batch, seq, version", [(2, 16, 0), (1, 32, 0), (2, 17, 1), (1, 5, 1)])
def test_each_version_still_gives_onnxruntimes_results(lib, batch, seq, version):
    x = np.random.default_rng(seq).standard_normal((batch, seq, 256)).astype(np.float32)
    assert_matches_onnxruntime(MODEL, lib, {"x": x}, rtol=1e-4, atol=1e-4, where=(batch, seq))
    assert lib.last_version == version
