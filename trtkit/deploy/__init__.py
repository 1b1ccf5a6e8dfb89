"""Deployment helpers: Triton Inference Server model repositories.

``triton_io`` reads what an artifact takes and returns (ONNX graph, engine
sidecar), ``triton_config`` writes and checks ``config.pbtxt``, ``triton``
writes the repository. The docker images live in ``docker/``; this package
holds the code that turns a finished build (its manifest) into something a
server loads.
"""
