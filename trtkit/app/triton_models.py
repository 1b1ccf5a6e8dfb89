"""The models ``trtkit serve`` binds into Triton (through PyTriton), two per served artifact.

``<name>_<precision>`` (e.g. ``resnet18_fp16``): input ``input`` FP32
[-1, C, H, W] (preprocessed, as the manifest's ``model.input`` says) ->
output ``logits`` FP32 [-1, K]. Triton's dynamic batcher joins requests into
batches of up to ``max_batch`` images (preferred: the engine profile's opt and
max); a request of the wrong shape or dtype is refused by Triton itself.

``<name>_<precision>_images``: input ``images`` BYTES [-1, 1] (one encoded
JPEG/PNG/... file per row), decoded and preprocessed on the server with the
build's contract -> ``logits`` FP32 [-1, K], ``top_classes`` INT64 [-1, k],
``top_probabilities`` FP32 [-1, k] and ``top_names`` BYTES [-1, k] (UTF-8
class names; the index when the build has none), best first, ``k`` =
``--top-k`` (a binary model's two classes: [negative, positive] by its one
logit or sigmoid). A multi-label model answers with its decision rule instead
of a ranking: ``probabilities`` FP32 [-1, L] and ``positive`` BOOL [-1, L]. It has no dynamic batcher: the
images of one request are one batch, so an image that does not decode fails its own request only.

A segmentation build's models: ``<name>_<precision>`` returns its score maps,
``logits`` FP32 [-1, C, h, w]; ``<name>_<precision>_images`` returns per image
``mask`` BYTES [-1, 1], the base64 text (JSON-safe) of a palette PNG of the
class-index mask at the image's own size (``numpy.asarray(PIL.Image.open(
io.BytesIO(base64.b64decode(text))))`` gives the uint8 class indices back,
255 where a centre crop cut the image off), and ``fractions`` FP32 [-1, K],
each class's share of the seen pixels (summing to 1): ``trtkit.app.maps``.

A detection build's: ``<name>_<precision>`` returns ``decoded`` (as ``logits``) FP32 [-1, A, 4 + C];
``<name>_<precision>_images`` returns per image every detection its head keeps, best first, in the image's own
pixels: ``boxes`` FP32 [-1, K, 4] (x1 y1 x2 y2), ``scores`` FP32 [-1, K], ``classes`` INT64 [-1, K], ``names``
BYTES [-1, K] and ``count`` INT64 [-1, 1], K the head's detections per image; rows from ``count`` on are
padding (class -1, score 0): ``tasks.detection``'s ``serve_answer``.

Each artifact's runner lives in one thread of its own (``Worker``): both of its
models queue their batches there, so a runner is never used by two threads at
once (a TensorRT execution context is not thread-safe) and a CUDA context is
current where the engine was loaded.
"""

import numpy as np

from trtkit import log, tasks
from trtkit.errors import TrtkitError

DEFAULT_MAX_BATCH = 32  # no profile to take it from (ONNX): the largest batch Triton forms


class Worker(object):
    """One artifact's loaded model (a Classifier or a Segmenter), loaded and run in a thread of its own."""

    def __init__(self, target, max_batch=None):
        from concurrent.futures import ThreadPoolExecutor
        from trtkit.app.loader import open_target
        self.target = target
        self._pool = ThreadPoolExecutor(max_workers=1)
        try:
            self.model = self._pool.submit(open_target, target, max_batch or DEFAULT_MAX_BATCH).result()
        except BaseException:
            self._pool.shutdown()
            raise
        self.batch_range = self.model.runner.batch_range()

    def logits(self, batch):
        return self._pool.submit(self.model.logits, batch).result()

    def close(self):
        try:
            self._pool.submit(self.model.close).result()
        finally:
            self._pool.shutdown()


def batching(worker, max_batch=None):
    """(max_batch_size, preferred batch sizes) for an artifact: ``max_batch`` or the profile's max, else 32."""
    batch_range = worker.batch_range
    if max_batch is None:
        max_batch = batch_range[2] if batch_range else DEFAULT_MAX_BATCH
    preferred = []
    if batch_range:
        preferred = sorted(set(b for b in batch_range[1:] if 1 < b <= max_batch))
    return int(max_batch), preferred


def model_names(target):
    """The two Triton model names of a Target: ``resnet18_fp16`` and ``resnet18_fp16_images``."""
    from trtkit.deploy.triton import model_name
    name = model_name(target.artifact or {"path": target.path})  # artifact resnet18.fp16, file resnet18.fp16.onnx
    return name, name + "_images"


def bindings(worker, max_batch=None, images=True, top_k=5, queue_delay_us=100):
    """The keyword arguments of ``Triton.bind`` for a Worker's models (see the module doc)."""
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    model = worker.model
    contract = model.contract
    classes = model.num_classes or -1
    max_batch, preferred = batching(worker, max_batch)
    k = min(int(top_k), classes) if classes > 0 else int(top_k)
    logits_name, images_name = model_names(worker.target)
    logits_out = Tensor(name="logits", dtype=np.float32, shape=tuple(d or -1 for d in model.output_shape))
    models = [dict(model_name=logits_name, infer_func=_logits_function(worker),
                   inputs=[Tensor(name="input", dtype=np.float32, shape=tuple(contract.shape))], outputs=[logits_out],
                   config=ModelConfig(max_batch_size=max_batch, batcher=DynamicBatcher(
                       max_queue_delay_microseconds=int(queue_delay_us), preferred_batch_size=preferred or None)))]
    if images:
        models.append(dict(
            model_name=images_name, infer_func=_images_function(worker, k),
            inputs=[Tensor(name="images", dtype=bytes, shape=(1,))],
            outputs=_answer_tensors(Tensor, model, k, logits_out),
            config=ModelConfig(max_batch_size=max_batch, batcher=None)))
    return models


def _answer_tensors(Tensor, model, k, logits_out):
    """The ``_images`` model's answer, the model's task's (``Task.serve_outputs``): top-k of single-label and
    binary models, per-label decisions of multi-label ones (their positives vary in number: no fixed k), masks
    and class fractions of segmentation ones (no score maps: they are the model input's size, not the image's)."""
    return tasks.of(model.task).serve_outputs(Tensor, model, k, logits_out)


def _bad_request(exc):
    """A request trtkit cannot serve: one line in the server's log, Triton's error response to the client.

    PyTriton answers an inference function's exception with Triton's 500 and the exception's traceback as the
    message (measured: 2.6 KB, four chained tracebacks with the server's paths for a request holding no
    image). The error raised here has no traceback to show, so the client reads trtkit's line (after
    PyTriton's own frames, which no inference function can remove)."""
    if not _BAD_REQUEST:
        from pytriton.exceptions import PyTritonBadParameterError

        class BadRequest(PyTritonBadParameterError):
            @property
            def __traceback__(self):  # what traceback.format_exception reads: nothing of the server's code
                return None

        BadRequest.__module__ = "trtkit"  # the client reads "trtkit.BadRequest: <trtkit's line>"
        BadRequest.__qualname__ = "BadRequest"
        _BAD_REQUEST.append(BadRequest)
    log.warn("refused a request: {}".format(exc))
    return _BAD_REQUEST[0](str(exc))


_BAD_REQUEST = []  # the class, made once (it subclasses PyTriton's, imported only when serving)


def _logits_function(worker):
    def infer(requests):
        arrays = [np.asarray(request["input"], dtype=np.float32) for request in requests]
        sizes = [a.shape[0] for a in arrays]
        try:
            logits = worker.logits(arrays[0] if len(arrays) == 1 else np.concatenate(arrays))
        except TrtkitError as exc:
            raise _bad_request(exc) from None  # no chain of PIL's and trtkit's tracebacks to the client
        return [{"logits": part} for part in np.split(logits, np.cumsum(sizes)[:-1])]
    return infer


def _images_function(worker, k):
    from trtkit.app.inputs import decode_bytes
    model = worker.model
    answer = tasks.of(model.task).serve_answer  # top classes, or masks and class fractions

    def infer(requests):
        responses = []
        for request in requests:
            encoded = np.asarray(request["images"]).reshape(-1)
            try:
                decoded = [decode_bytes(data, model.contract) for data in encoded]
                logits = worker.logits(np.stack([array for array, _ in decoded]))
            except TrtkitError as exc:
                raise _bad_request(exc) from None
            responses.append(answer(model, logits, [size for _, size in decoded], k))
        return responses
    return infer
