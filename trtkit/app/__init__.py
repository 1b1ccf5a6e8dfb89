"""The engine in the user's application: load a built artifact, classify, segment or detect, serve it.

``trtkit.load(path)`` (``loader.py``) -> ``Classifier`` (``classifier.py``) or,
for a segmentation build, ``Segmenter`` (``segmenter.py``: masks at each image's
own size through ``maps.py``, drawn by ``palette.py``) or, for a detection build,
``Detector`` (``detector.py``: boxes in each image's own pixels; ``box_files.py``
draws them and writes COCO results for ``predict``), all ``model.LoadedModel``s,
is what an application imports; ``locate.py`` decides which artifact a path means and
where its input contract comes from (the manifest, the ONNX metadata, an
engine's sidecar); ``inputs.py`` turns files, PIL images and arrays into model
inputs with the build's preprocessing, in bounded memory; ``serve.py`` and
``triton_models.py`` serve a build on a Triton Inference Server through PyTriton
(the ``serve`` extra, imported only by ``trtkit serve``).

Nothing here is imported by ``import trtkit`` beyond ``loader.py``, ``model.py``,
``classifier.py``, ``segmenter.py``, ``detector.py`` and ``maps.py``, which need only numpy until a
model is loaded.
"""
