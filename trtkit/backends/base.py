"""The runner contract every backend implements, and the backend interface that builds artifacts.

A *Backend* turns a precision-specific ONNX file into an artifact it can run
(for ONNX Runtime the ONNX file itself, for TensorRT a serialized engine).
A *Runner* loads one artifact and runs numpy batches through it. Verification
and benchmarking only ever talk to Runners, so a new backend is one new module
in ``trtkit/backends`` and one line in its registry.
"""

import os
import time


class TensorSpec(object):
    """Name, shape (None or a string for dynamic axes) and numpy dtype name of one I/O tensor."""

    def __init__(self, name, shape, dtype):
        self.name = name
        self.shape = tuple(shape)
        self.dtype = str(dtype)

    @property
    def dims(self):
        """The shape as ONNX, TensorRT and Triton write it: a list of ints, -1 for each dynamic axis."""
        return [d if isinstance(d, int) and not isinstance(d, bool) and d >= 0 else -1 for d in self.shape]

    def to_dict(self):
        return {"name": self.name, "shape": [d if isinstance(d, int) else None for d in self.shape], "dtype": self.dtype}

    def __repr__(self):
        return "TensorSpec({!r}, {}, {})".format(self.name, self.shape, self.dtype)


class Runner(object):
    """Load one artifact, run numpy batches through it.

    Use as a context manager (``with runner:``) or call ``activate()`` /
    ``deactivate()``. ``infer`` takes a float32 NCHW batch and returns the
    first output as float32; ``infer_all`` returns every output by name.
    ``last_infer_seconds`` is the time of the last call, host copies included.

    Every optional query has a default here (as in Polygraphy's BaseRunner),
    so callers such as the benchmarker ask the runner instead of guessing from
    its backend name or probing for attributes. The defaults describe a host
    runner; GPU runners override what differs:

    - ``device``: where inference runs, ``"cpu"`` or ``"cuda"``;
    - ``synchronize()``: wait for queued device work (nothing to wait for on the host);
    - ``batch_range()``: (min, opt, max) batch the artifact accepts, None for any;
    - ``stage(batch)`` / ``run_staged(staged)``: put inputs where the runner
      computes, then run without copying them again. ``stages_on_device`` says
      whether that skips host<->device copies; by default staging is the numpy
      batch itself and ``run_staged`` is ``infer``, so it times the same as ``infer``;
    - ``device_timer()``: a timer of device time for ``run_staged``, None to use
      the host clock after ``synchronize()``;
    - ``reset_peak_memory()`` / ``peak_memory_bytes()``: device memory high-water
      mark, None where the runner cannot tell.
    """

    backend = "base"
    device = "cpu"
    stages_on_device = False

    def __init__(self, path):
        self.path = path
        self.active = False
        self.last_infer_seconds = None

    # lifecycle ---------------------------------------------------------
    def activate(self):
        if not self.active:
            self._activate()
            self.active = True
        return self

    def deactivate(self):
        if self.active:
            self._deactivate()
            self.active = False

    def __enter__(self):
        return self.activate()

    def __exit__(self, exc_type, exc, tb):
        self.deactivate()
        return False

    # inference ---------------------------------------------------------
    def infer(self, batch):
        """Run one batch; returns the first output."""
        outputs = self.infer_all(batch)
        return outputs[self.outputs()[0].name]

    def infer_all(self, batch):
        if not self.active:
            self.activate()
        start = time.perf_counter()
        result = self._infer(batch)
        self.last_infer_seconds = time.perf_counter() - start
        return result

    def describe(self):
        """What actually ran (for manifests and logs): backend, device, artifact file name and I/O specs."""
        return {"backend": self.backend, "device": self.device, "path": os.path.basename(self.path),
                "inputs": [t.to_dict() for t in self.inputs()],
                "outputs": [t.to_dict() for t in self.outputs()]}

    # optional queries: defaults for a host runner ------------------------
    def synchronize(self):
        """Wait until queued device work is done; host runners return at once (``infer`` is synchronous)."""

    def batch_range(self):
        """(min, opt, max) batch sizes the artifact accepts, or None when any batch works.

        The default reads the first input: a fixed first dimension N (a model
        exported with a static batch) gives (N, N, N). Engines with an
        optimization profile override this.
        """
        inputs = self.inputs()
        dim = inputs[0].shape[0] if inputs and inputs[0].shape else None
        if isinstance(dim, int) and dim > 0:
            return dim, dim, dim
        return None

    def accepted_batch(self, wanted):
        """The batch size nearest ``wanted`` that ``batch_range()`` allows."""
        batch_range = self.batch_range()
        if batch_range is None:
            return wanted
        low, _, high = batch_range
        return max(low, min(wanted, high))

    def stage(self, batch):
        """Put a numpy batch where the runner computes; returns what ``run_staged`` takes.

        Default: the batch itself (host memory), so staging saves nothing.
        """
        return batch

    def run_staged(self, staged):
        """Run a staged batch without copying it again; returns the outputs where they are.

        Default: ``infer`` on the host batch (copies, if any, included).
        Device runners return device tensors and do not synchronize.
        """
        return self.infer(staged)

    def device_timer(self):
        """A timer (``start()``, ``stop()`` -> seconds, ``sync``) of device time, or None for the host clock."""
        return None

    def reset_peak_memory(self):
        """Start a new peak-memory window (nothing to reset where peaks are not tracked)."""

    def peak_memory_bytes(self):
        """Peak device memory since ``reset_peak_memory()``; None where the runner cannot tell."""
        return None

    # to implement ------------------------------------------------------
    def _activate(self):
        raise NotImplementedError

    def _deactivate(self):
        pass

    def _infer(self, batch):
        """Return {output name: numpy array} for one input batch."""
        raise NotImplementedError

    def inputs(self):
        """Input TensorSpecs. Default: activate, then the ``_inputs`` list that ``_activate`` set (runners that
        know their I/O without loading the artifact, like TensorRT's from its sidecar, override this)."""
        if not self.active:
            self.activate()
        return self._inputs

    def outputs(self):
        """Output TensorSpecs; default as ``inputs``, from ``_outputs``."""
        if not self.active:
            self.activate()
        return self._outputs


def run_batches(runner, images, batch_size=32):
    """Run every image through ``runner`` in batches it accepts; returns the first output for all of them.

    The one loop every caller of a runner over many images uses (verification, the benchmark's agreement,
    ``predict``, QAT's runtime check). Batches are ``batch_size`` images, kept inside the runner's
    ``batch_range()`` (an engine's optimization profile, a model's fixed batch); a last chunk smaller than the
    range's minimum is padded and the padding's rows dropped.
    """
    batch_range = runner.batch_range()
    size, minimum = runner.accepted_batch(batch_size), batch_range[0] if batch_range else 1
    import numpy as np
    outputs = []
    for start in range(0, images.shape[0], size):
        chunk = images[start:start + size]
        real = chunk.shape[0]
        if real < minimum:
            pad = np.zeros((minimum - real,) + chunk.shape[1:], dtype=chunk.dtype)
            chunk = np.concatenate([chunk, pad])
        outputs.append(np.asarray(runner.infer(chunk), dtype=np.float32)[:real])
    return np.concatenate(outputs)


class Backend(object):
    """Builds artifacts from ONNX and creates Runners for them.

    Subclasses set ``name``, ``int8_encoding`` (which Q/DQ encoding the
    calibration module writes for it: ``"cpu"`` or ``"tensorrt"``) and
    ``artifact_suffix``; they implement ``availability``, ``build`` and ``runner``.
    """

    name = "base"
    int8_encoding = "tensorrt"
    artifact_suffix = ".onnx"
    precisions = ("fp32", "fp16", "int8")
    # whether --backend auto may pick it (a property where it depends on the machine), and why not
    auto_selectable = True
    auto_skip_reason = "not picked by auto"

    def availability(self):
        """(usable, reason): reason says why not, or what was found."""
        raise NotImplementedError

    def build(self, onnx_path, precision, out_path, inputs=None, calibration=None):
        """Build the artifact for ``precision`` from ``onnx_path`` at ``out_path`` (atomically).

        ``inputs`` is a ``BuildInputs`` (what the build knows besides this ONNX),
        ``calibration`` the INT8 calibration (``precision.calibrate.Int8Calibration``)
        when ``precision`` is int8. Returns a dict of backend-specific metadata for
        the manifest.
        """
        raise NotImplementedError

    def runner(self, artifact_path, options=None):
        raise NotImplementedError

    def onnx_parser_version(self):
        """The TensorRT version whose ONNX parser reads this backend's ONNX (it caps the export's opset:
        ``trtkit.onnx.opsets``), or None when no TensorRT table applies."""
        return None

    def nms_placement(self):
        """Where a detector's NMS runs with this backend: ``("graph", why)`` when its artifacts run ONNX
        ``NonMaxSuppression`` (``detect.onnx_nms`` is appended to every variant), ``("host", why)`` when the
        host selects (``detect.select``, numpy). Default: the host."""
        return "host", "{} runs no NonMaxSuppression: the host selects (numpy)".format(self.name)

    # True for a runtime whose NonMaxSuppression drops a box at an IoU equal to its threshold (OpenVINO, measured)
    nms_equal_suppresses = False


class BuildInputs(object):
    """What a backend may use besides the precision's ONNX file, passed explicitly to ``Backend.build``.

    ``contract``: the InputContract (sizes for dynamic image dims); ``fp32_onnx``:
    the build's FP32 ONNX (the implicit-INT8 path and the FP16 fallback start from
    it); ``default_batch``: the (min, opt, max) profile the build would like when
    none is given; ``work_dir``: where intermediate files may be written (they
    become part of the build); ``torch_model``: the PyTorch model when there is
    one (torch2trt); ``tensorrt``: ``TensorRTOptions`` (None: defaults); ``image_sizes``: (smallest,
    largest) image size dynamic H and W must cover (None: the contract's size only).
    """

    def __init__(self, contract=None, fp32_onnx=None, default_batch=(1, 8, 32), work_dir=None, torch_model=None,
                 tensorrt=None, image_sizes=None):
        self.image_sizes = tuple(image_sizes) if image_sizes else None
        self.contract = contract
        self.fp32_onnx = fp32_onnx
        self.default_batch = tuple(default_batch)
        self.work_dir = work_dir
        self.torch_model = torch_model
        self.tensorrt = tensorrt
