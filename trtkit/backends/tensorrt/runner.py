"""Runs a serialized engine: the same contract as the ONNX Runtime runner (trtkit/backends/base.py).

Before TensorRT sees the file, the sidecar is checked (truncation, TensorRT
version, GPU), so a mismatch is one clear message rather than a "version tag"
failure. With no GPU, activating raises DeviceUnavailable: the build pipeline
then records the engine as built, not run. I/O buffers come from
``buffers.open_device`` (torch CUDA tensors, else pycuda).

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
from trtkit.backends.tensorrt.sidecar import check_compatible, check_file, read_sidecar
from trtkit.errors import DeviceUnavailable, EngineMismatch, InputError


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

    def check(self):
        """Every check that needs no GPU: file complete, sidecar matches this TensorRT. Returns the sidecar."""
        self.record = read_sidecar(self.path)
        check_file(self.path, self.record)
        trt = api.load(self.flavour)
        gpu = gpu_probe.probe()
        check_compatible(self.record, self.flavour, api.version_tuple(trt), gpu)
        if gpu is None:
            raise DeviceUnavailable("no NVIDIA GPU here: the {} engine {} cannot run".format(
                self.flavour, os.path.basename(self.path)),
                                    hint="copy it to a machine with the GPU it was built for")
        return trt

    def _activate(self):
        trt = self.check()
        from trtkit.backends.tensorrt.buffers import open_device
        self.trt = trt
        self._memory = open_device(self.options.get("buffers"))
        self.logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self.logger)
        with open(self.path, "rb") as handle:
            data = handle.read()
        self.engine = self.runtime.deserialize_cuda_engine(data)
        if self.engine is None:
            raise EngineMismatch("{} {} could not load {}: built by another TensorRT, for another GPU, or "
                                 "damaged".format(self.flavour, trt.__version__, self.path),
                                 hint="rebuild the engine on this device")
        self.context = self.engine.create_execution_context()
        self._io = api.engine_io(trt, self.engine)
        self._profiles = {}
        for index, (name, is_input, shape, _) in enumerate(self._io):
            if is_input:
                self._profiles[name] = api.profile_shape(self.engine, name, index)

    def _deactivate(self):
        self._buffers = {}
        self.context = None
        self.engine = None
        self.runtime = None
        if self._memory is not None:
            self._memory.close()
        self._memory = None

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
            self._buffers = {}  # one shape at a time keeps GPU memory bounded
            buffers = {}
            for index, (n, is_input, _, t) in enumerate(self._io):
                shape = input_shape if is_input else api.output_shape(self.context, n, index)
                buffers[n] = self._memory.empty(shape, t)
            self._buffers[key] = buffers
        return self._buffers[key]
