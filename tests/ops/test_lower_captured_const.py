"""A constant captured into an If branch is still a constant to the lowering (regression:
silero_vad_op18_ifless, whose branches slice with axes captured from the main graph, was
refused with "slice axes must be known at compile time")."""

from onnx import TensorProto as T
from onnx import helper as h

from onnxcc.testing import check_lowering


def _model():
    def branch(name, negate):
        n = [h.make_node("Slice", ["x", "starts", "ends", "axes"], [f"s_{name}"]),
             h.make_node("Neg" if negate else "Identity", [f"s_{name}"], [f"y_{name}"])]
        return h.make_graph(n, name, [], [h.make_tensor_value_info(f"y_{name}", T.FLOAT, None)])

    nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             h.make_node("Constant", [], ["z"], value=h.make_tensor("z", T.FLOAT, [], [0.0])),
             h.make_node("Greater", ["s", "z"], ["cond"]),  # data: the If stays
             h.make_node("If", ["cond"], ["y"], then_branch=branch("then", False),
                         else_branch=branch("else", True))]
    inits = [h.make_tensor("starts", T.INT64, [1], [1]), h.make_tensor("ends", T.INT64, [1], [3]),
             h.make_tensor("axes", T.INT64, [1], [-1])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["batch", 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_slice_with_axes_captured_into_a_branch_lowers_and_matches_onnxruntime():
    m = _model()
    # two settings so that both branches run (the sum's sign decides)
    check_lowering(m, [{"batch": 2}, {"batch": 3}, {"batch": 1}], pipeline="shape-inference,canonicalize,prune-symbols")
