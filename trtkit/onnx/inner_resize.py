"""A graph that takes its image at any size and resizes it inside to the network's one size (TensorFlow's Object
Detection API and Model Garden exports: a uint8 ``[1, None, None, 3]`` input, ``tf.image.resize`` to the
network's size, boxes as fractions of the image or in its pixels).

Why trtkit builds such a graph at the size it resizes to: trtkit's artifacts take one fixed input size, so the
image is resized once, by trtkit, to the network's own size, and the graph's resize then maps that size to
itself (ONNX Resize's ``linear`` and ``half_pixel`` sample every pixel at its own place: the identity). Any other
size would resize twice. Boxes come out as fractions of the input or in its pixels, which trtkit maps back
through its own resize to each image's pixels, as the export maps them to its input. The resize trtkit does is
the graph's: ``stretch`` (a resize to a fixed height and width keeps no aspect ratio), with the filter that
samples as its Resize does (``tf``: bilinear with half-pixel centres, in float, no antialiasing, for ``linear``
and ``half_pixel``, tf.image.resize's; ``asymmetric`` for TF1's ``resize_bilinear``).

Read by structure and one run: the first ``Resize`` downstream of the image input through element-wise and layout
ops, whose output's height and width are the same for two input sizes (the part of the graph up to it run on
zero images of 2 sizes by ONNX Runtime; its sizes are usually a ``Concat`` of the input's shape and constants).
A resize whose size follows the image (the Object Detection API's ``keep_aspect_ratio_resizer``) is not read:
such a graph still needs ``--input-size``.
"""

import numpy as np

from trtkit.deps import require

_BEFORE = ("Cast", "Transpose", "Mul", "Div", "Add", "Sub", "Identity", "Unsqueeze", "Squeeze", "Reshape")
FILTERS = {("linear", "half_pixel"): "tf", ("linear", "pytorch_half_pixel"): "tf",
           ("linear", "asymmetric"): "asymmetric"}
PROBES = ((48, 80), (96, 72))  # two input sizes (height, width) the resize's output is read at


def _attribute(node, name, default):
    for attribute in node.attribute:
        if attribute.name == name:
            return attribute.s.decode() if attribute.type == attribute.STRING else attribute.i
    return default


def _first_resize(model, image):
    """The first Resize reached from ``image`` through ``_BEFORE`` ops (the image's own data, not its shape)."""
    consumers = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    frontier, seen = [image], set()
    for _ in range(12):
        step = []
        for tensor in frontier:
            for node in consumers.get(tensor, []):
                if id(node) in seen or node.input[0] != tensor:
                    continue
                seen.add(id(node))
                if node.op_type == "Resize":
                    return node
                if node.op_type in _BEFORE:
                    step.extend(node.output)
        frontier = step
    return None


def read(model, layout_nhwc):
    """{"size": [H, W], "node", "mode", "coordinates", "filter"} of the graph's inner resize to a fixed size, for
    an image input whose height and width are dynamic; None when there is none. ``filter``: trtkit's resize
    filter that samples as the Resize does, None for another mode (nearest, cubic)."""
    from trtkit.onnx.load import keep_outputs
    from trtkit.onnx.normalize import graph_inputs
    onnx = require("onnx")
    ort = require("onnxruntime", "reading a graph's inner resize")
    image = graph_inputs(model)[0]
    node = _first_resize(model, image.name)
    if node is None:
        return None
    part = onnx.ModelProto()
    part.CopyFrom(model)
    keep_outputs(part, [node.output[0]])
    dtype = np.uint8 if image.type.tensor_type.elem_type == onnx.TensorProto.UINT8 else np.float32
    dims = [d.dim_value for d in image.type.tensor_type.shape.dim]
    batch, channels = dims[0] or 1, dims[3 if layout_nhwc else 1] or 3
    try:
        session = ort.InferenceSession(part.SerializeToString(), providers=["CPUExecutionProvider"])
        shapes = []
        for height, width in PROBES:
            shape = (batch, height, width, channels) if layout_nhwc else (batch, channels, height, width)
            shapes.append(tuple(session.run(None, {image.name: np.zeros(shape, dtype)})[0].shape))
    except Exception:  # a graph whose front cannot run alone: no inner resize read
        return None
    if len(shapes[0]) != 4 or shapes[0] != shapes[1]:
        return None
    spatial = (1, 2) if shapes[0][3] == channels and shapes[0][1] != channels else (2, 3)  # NHWC, else NCHW data
    mode = _attribute(node, "mode", "nearest")
    opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [0])
    # Resize-10 has no coordinate mode: it samples as 'asymmetric'; from 11 the default is 'half_pixel'
    coordinates = _attribute(node, "coordinate_transformation_mode", "half_pixel" if opset >= 11 else "asymmetric")
    antialiased = _attribute(node, "antialias", 0) == 1  # opset 18: a filter none of trtkit's samples as
    return {"size": [int(shapes[0][spatial[0]]), int(shapes[0][spatial[1]])], "node": node.name or node.output[0],
            "mode": mode, "coordinates": coordinates, "antialias": antialiased,
            "filter": None if antialiased else FILTERS.get((mode, coordinates))}
