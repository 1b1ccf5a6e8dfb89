"""The engine in the user's application: load a built artifact, classify images, serve it.

``trtkit.load(path)`` -> ``Classifier`` (``classifier.py``) is what an
application imports; ``locate.py`` decides which artifact a path means and
where its input contract comes from (the manifest, the ONNX metadata, an
engine's sidecar); ``inputs.py`` turns files, PIL images and arrays into model
inputs with the build's preprocessing, in bounded memory; ``serve.py`` and
``triton_models.py`` serve a build on a Triton Inference Server through PyTriton
(the ``serve`` extra, imported only by ``trtkit serve``).

Nothing here is imported by ``import trtkit`` beyond ``classifier.py``, which
itself needs only numpy until a model is loaded.
"""
