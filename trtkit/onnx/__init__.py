"""ONNX in and out: export from PyTorch, loading and normalizing foreign graphs, the classifier's interface.

``export`` writes and validates trtkit's own FP32 ONNX; ``load`` reads any ONNX
file (trtkit's or another framework's) and brings it into the form the rest of
trtkit expects, helped by ``normalize`` (graph clean-ups) and ``layout`` (input
layout and output kind). Nothing here imports onnx at module level.
"""
