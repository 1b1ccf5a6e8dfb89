"""What the tests of graphs with their selection inside (``test_detect_nms_tail``, ``test_tf_exports``) ask of
an INT8 build: its network quantized, its rebuilt tail and selection float."""

import os


def quantized_tail_is_float(out, manifest):
    """Whether the INT8 artifact (its selection appended) quantizes its network and reads no DequantizeLinear's
    output in the rebuilt tail (``decode/`` nodes) or the selection after it (``trtkit_nms/``)."""
    import onnx
    int8 = [a for a in manifest["artifacts"] if a["precision"] == "int8"][0]
    model = onnx.load(os.path.join(out, int8["path"]))
    dequantized = set(n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear")
    tail = [n for n in model.graph.node if n.name.startswith(("decode/", "trtkit_nms/"))]
    assert len(tail) > 20 and len(dequantized) >= 5
    return not any(i in dequantized for n in tail for i in n.input)
