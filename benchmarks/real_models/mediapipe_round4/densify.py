"""Rewrite a TFLite model's DENSIFY ops (sparse constant weights) into dense constants, for tf2onnx."""
import sys, numpy as np, flatbuffers
import tensorflow as tf
from tensorflow.lite.python import schema_py_generated as S
source, target = sys.argv[1], sys.argv[2]
interp = tf.lite.Interpreter(source, experimental_preserve_all_tensors=True)
interp.allocate_tensors()
interp.set_tensor(interp.get_input_details()[0]['index'], np.zeros(interp.get_input_details()[0]['shape'], np.float32))
interp.invoke()
model = S.ModelT.InitFromObj(S.Model.GetRootAsModel(bytearray(open(source, 'rb').read()), 0))
graph = model.subgraphs[0]
codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in model.operatorCodes]
ops, n = [], 0
for op in graph.operators:
    if codes[op.opcodeIndex] == S.BuiltinOperator.DENSIFY:
        out = op.outputs[0]
        dense = interp.get_tensor(out)
        buf = S.BufferT(); buf.data = np.ascontiguousarray(dense).tobytes()
        model.buffers.append(buf)
        graph.tensors[out].buffer = len(model.buffers) - 1
        sparse = graph.tensors[op.inputs[0]]
        sparse.sparsity = None
        sparse.buffer = 0
        n += 1
        continue
    ops.append(op)
graph.operators = ops
builder = flatbuffers.Builder(1 << 22)
builder.Finish(model.Pack(builder), file_identifier=b'TFL3')
open(target, 'wb').write(builder.Output())
print('densified', n)
