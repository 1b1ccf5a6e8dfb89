"""Runs a serialized engine: the same contract as the ONNX Runtime runner (trtkit/backends/base.py).

Before TensorRT sees the file, the sidecar is checked (truncation, TensorRT
version, GPU), so a mismatch is one clear message rather than a "version tag"
failure. With no GPU, activating raises DeviceUnavailable: the build pipeline
then records the engine as built, not run. I/O buffers come from
``buffers.open_device`` (torch CUDA tensors, else pycuda).

A GPU TensorRT-RTX has no target for (Hopper: SM 9.0) is the same case as no
GPU: ``check`` raises DeviceUnavailable naming the GPU and TensorRT-RTX's
targets, so a build there records its engines as built, not run.
``probe_engine`` skips those checks and reports what TensorRT itself says when
asked to load an engine anyway (``scripts/gpu_check.py`` records it). Contexts
come from ``api.create_context``: on TensorRT-RTX dynamic-shape kernels are
specialized eagerly, so timings never measure the lazy fallback kernels.

Of the Runner contract's optional queries it answers ``device`` ("cuda"),
``synchronize`` (its stream), ``batch_range`` (the engine's profile) and staged
I/O (the input uploaded once into the engine's buffer, outputs left on the
GPU). Peak memory keeps the default (None): TensorRT's own allocations are not
visible through torch's allocator.
"""

import os

import numpy as np

from trtkit.backends.base import Runner, TensorSpec
from trtkit.backends.tensorrt import api, gpu as gpu_probe
from trtkit.backends.tensorrt.logger import capturing_logger, collector_paused, reason
from trtkit.backends.tensorrt.sidecar import check_compatible, check_file, read_sidecar
from trtkit.errors import DeviceUnavailable, EngineMismatch, InputError


def check_image_dims(shape, profile):
    """InputError when the dims after the batch of ``shape`` lie outside an optimization ``profile`` ((min,
    opt, max) shapes; None: nothing to check): an image size the engine was not built for."""
    if not profile:
        return
    low, _, high = profile
    outside = [axis for axis in range(1, len(shape)) if not low[axis] <= shape[axis] <= high[axis]]
    if outside:
        spans = ", ".join("{}..{}".format(low[a], high[a]) for a in outside)
        raise InputError("input {} is outside the engine's profile ({} for axis {})".format(
            "x".join(str(d) for d in shape), spans, ",".join(str(a) for a in outside)),
            hint="rebuild with --image-sizes MIN,MAX covering it")


class TensorRTRunner(Runner):
    backend = "tensorrt"
    device = "cuda"
    stages_on_device = True

    def __init__(self, path, flavour="tensorrt", options=None):
        super(TensorRTRunner, self).__init__(path)
        self.flavour = flavour
        self.backend = flavour
        self.options = dict(options or {})
        self.record = None
        self._io = None
        self._memory = None  # buffers.open_device(): allocations, copies and the stream
        self._buffers = {}
        self.kernel_specialization = None  # "eager" on TensorRT-RTX (api.create_context)

    def check(self):
        """Every check that needs no engine loaded: file complete, sidecar matches this TensorRT, a GPU that can
        run it. Returns the TensorRT module."""
        self.record = read_sidecar(self.path)
        check_file(self.path, self.record)
        trt = api.load(self.flavour)
        gpu = gpu_probe.probe()
        reason = unrunnable_reason(trt, self.flavour, gpu)
        check_compatible(self.record, self.flavour, api.version_tuple(trt), gpu if reason is None else None)
        if reason is not None:
            raise DeviceUnavailable("{}: the {} engine {} cannot run here".format(
                reason, self.flavour, os.path.basename(self.path)), hint=_unrunnable_hint(trt, self.flavour, gpu))
        return trt

    def _activate(self):
        with collector_paused():  # TensorRT logs while loading: see logger.collector_paused
            self._load()

    def _load(self):
        trt = self.check()
        from trtkit.backends.tensorrt.buffers import open_device
        self.trt = trt
        self._memory = open_device(self.options.get("buffers"))
        self._messages = []
        self.logger = capturing_logger(trt, self._messages, forward=True)
        self.runtime = trt.Runtime(self.logger)
        with open(self.path, "rb") as handle:
            data = handle.read()
        self.engine = self.runtime.deserialize_cuda_engine(data)
        if self.engine is None:
            said = reason(self._messages)
            raise EngineMismatch("{} {} could not load {}: built by another TensorRT, for another GPU, or "
                                 "damaged{}".format(self.flavour, trt.__version__, self.path,
                                                    " (TensorRT: {})".format(said) if said else ""),
                                 hint="rebuild the engine on this device")
        self.context, self.kernel_specialization = api.create_context(trt, self.engine)
        self._io = api.engine_io(trt, self.engine)
        self._profiles = {}
        for index, (name, is_input, shape, _) in enumerate(self._io):
            if is_input:
                self._profiles[name] = api.profile_shape(self.engine, name, index)

    def _deactivate(self):
        """Wait for the stream, then free: copies and the engine queued on it may still use the buffers.

        Freeing first hands memory back (torch's caching allocator, cuMemFree) while the GPU still
        reads or writes it. The buffers go before the engine and the device's own ``close`` (which
        pops pycuda's context, needed to free pycuda memory).
        """
        memory = self._memory
        try:
            if memory is not None:
                memory.synchronize()
        finally:
            self._buffers = {}
            self.context = None
            self.engine = None
            self.runtime = None
            self._memory = None
            if memory is not None:
                memory.close()

    def describe(self):
        """The base record plus which TensorRT ran it, how its kernels were specialized and the I/O memory."""
        record = super(TensorRTRunner, self).describe()
        record["flavour"] = self.flavour
        if self.kernel_specialization:
            record["kernel_specialization"] = self.kernel_specialization
        if self._memory is not None:
            record["buffers"] = self._memory.name
        return record

    def _specs(self, want_inputs):
        if self._io is not None:
            return [TensorSpec(n, [d if d >= 0 else None for d in s], t) for n, i, s, t in self._io if i == want_inputs]
        if self.record is None:
            self.record = read_sidecar(self.path)
        if self.record is not None:
            items = self.record["inputs" if want_inputs else "outputs"]
            return [TensorSpec(t["name"], [d if d >= 0 else None for d in t["shape"]], t["dtype"]) for t in items]
        self.activate()
        return self._specs(want_inputs)

    def inputs(self):
        return self._specs(True)

    def outputs(self):
        return self._specs(False)

    def batch_range(self):
        """(min, opt, max) batch of the first input: its fixed batch, else optimization profile 0."""
        if not self.active:
            self.activate()
        name, _, shape, _ = self._first_input()
        if shape[0] >= 0:
            return shape[0], shape[0], shape[0]
        profile = self._profiles.get(name)
        if not profile:
            return None
        low, opt, high = profile
        return low[0], opt[0], high[0]

    def synchronize(self):
        if self._memory is not None:
            self._memory.synchronize()

    def _first_input(self):
        return [entry for entry in self._io if entry[1]][0]

    def stage(self, batch):
        """Upload the batch into the engine's input buffer once; returns its shape for ``run_staged``."""
        if not self.active:
            self.activate()
        batch = self._prepare(batch)
        buffers = self._buffers_for(batch.shape)
        self._memory.upload(buffers[self._first_input()[0]], batch)
        return batch.shape

    def run_staged(self, staged):
        """Run the engine on the staged input; returns {output name: device buffer} (no copy, no sync)."""
        self._set_shape(staged)
        buffers = self._buffers_for(staged)
        self._execute(buffers)
        return dict((n, buffers[n]) for n, is_input, _, _ in self._io if not is_input)

    def _prepare(self, batch):
        """The batch in the engine's dtype, checked against its profile and shape; sets the context's shape."""
        name, _, shape, dtype = self._first_input()
        batch = np.ascontiguousarray(batch, dtype=dtype)
        batch_range = self.batch_range()
        if batch_range is not None and not batch_range[0] <= batch.shape[0] <= batch_range[2]:
            raise InputError("batch of {} is outside the engine's profile ({}..{})".format(
                batch.shape[0], batch_range[0], batch_range[2]), hint="rebuild with --batch MIN:OPT:MAX covering it")
        expected = tuple(shape[1:])
        if tuple(d for d in expected) != tuple(batch.shape[1:]) and all(d >= 0 for d in expected):
            raise InputError("input shape {} does not match the engine's {}".format(batch.shape, shape))
        check_image_dims(batch.shape, self._profiles.get(name))
        self._set_shape(batch.shape)
        return batch

    def _set_shape(self, input_shape):
        name = self._first_input()[0]
        index = [entry[0] for entry in self._io].index(name)
        if api.set_input_shape(self.context, name, index, input_shape) is False:
            raise InputError("TensorRT refused input shape {}".format(tuple(input_shape)))

    def _execute(self, buffers):
        names = [entry[0] for entry in self._io]
        addresses = [self._memory.address(buffers[n]) for n in names]
        if not api.execute(self.context, addresses, names, self._memory.stream_handle):
            raise InputError("TensorRT failed to run the engine (see its messages above)")

    def _infer(self, batch):
        batch = self._prepare(batch)
        buffers = self._buffers_for(batch.shape)
        self._memory.upload(buffers[self._first_input()[0]], batch)
        self._execute(buffers)
        result = {}
        for n, is_input, _, t in self._io:
            if not is_input:
                out = self._memory.download(buffers[n])
                result[n] = out.astype(np.float32) if out.dtype == np.float16 else out
        return result

    def _buffers_for(self, input_shape):
        key = tuple(input_shape)
        if key not in self._buffers:
            if self._buffers:  # the previous shape's buffers may still feed queued work (``run_staged``)
                self._memory.synchronize()
            self._buffers = {}  # one shape at a time keeps GPU memory bounded
            buffers = {}
            for index, (n, is_input, _, t) in enumerate(self._io):
                shape = input_shape if is_input else api.output_shape(self.context, n, index)
                buffers[n] = self._memory.empty(shape, t)
            self._buffers[key] = buffers
        return self._buffers[key]


def unrunnable_reason(trt, flavour, gpu):
    """Why no engine of ``trt`` can run on ``gpu`` (``gpu.probe()``), or None when one can.

    No GPU at all; or TensorRT-RTX on a GPU it has no target for: its engines
    run only on the SMs of ``trt.ComputeCapability`` (no Hopper, SM 9.0), so
    trying would end in a failed deserialization instead of a clear message.
    """
    if gpu is None:
        return "no NVIDIA GPU here"
    if flavour == "tensorrt-rtx" and not api.rtx_supports(trt, gpu["compute_capability"]):
        major_minor = ".".join(str(p) for p in api.version_tuple(trt)[:2])
        return "TensorRT-RTX {} has no target for {} (SM {})".format(major_minor, gpu["name"],
                                                                     gpu["compute_capability"])
    return None


def _unrunnable_hint(trt, flavour, gpu):
    if gpu is None:
        return "copy it to a machine with the GPU it was built for"
    return ("TensorRT-RTX engines run on SM {}; the engine is kept: run it on such a GPU, or build with "
            "--backend tensorrt (classic TensorRT) for this one".format(", ".join(api.rtx_targets(trt))))


def probe_engine(path, flavour="tensorrt-rtx"):
    """Ask TensorRT itself to load ``path`` here, skipping trtkit's checks; returns what happened.

    For the record of a GPU the checks refuse (TensorRT-RTX on Hopper): TensorRT's
    own words, in {"deserialized": bool, "context": bool, "messages": [...],
    "error": text or None, "gpu": gpu.probe()}. Never raises for TensorRT's failures.
    """
    with collector_paused():
        return _probe_engine(path, flavour)


def _probe_engine(path, flavour):
    trt = api.load(flavour)
    result = {"path": os.path.basename(path), "flavour": flavour, "tensorrt_version": trt.__version__,
              "gpu": gpu_probe.probe(), "deserialized": False, "context": False, "messages": [], "error": None}
    logger = capturing_logger(trt, result["messages"])
    try:
        runtime = trt.Runtime(logger)
        with open(path, "rb") as handle:
            engine = runtime.deserialize_cuda_engine(handle.read())
        result["deserialized"] = engine is not None
        if engine is not None:
            context, result["kernel_specialization"] = api.create_context(trt, engine)
            result["context"] = context is not None
            del context, engine
    except Exception as exc:  # the Python bindings raise for some refusals instead of returning None
        result["error"] = "{}: {}".format(exc.__class__.__name__, exc)
    return result
