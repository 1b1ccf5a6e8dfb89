"""The two registry entries: ``tensorrt`` (8.2 ... 11.x) and ``tensorrt-rtx``.

TensorRT needs its GPU to build. TensorRT-RTX builds ahead of time without one
(engines are then recorded as built, not run), but ``--backend auto`` picks it
only on a GPU it supports, so a machine with no GPU gets ONNX Runtime.
"""

from trtkit.backends.base import Backend, BuildInputs
from trtkit.backends.tensorrt import api, gpu as gpu_probe
from trtkit.backends.tensorrt.options import TensorRTOptions



class TensorRTBackend(Backend):
    name = "tensorrt"
    flavour = "tensorrt"
    int8_encoding = "tensorrt"
    artifact_suffix = ".engine"

    def _module_and_gpu(self):
        """(TensorRT module or None, GPU description or None, reason the module is missing)."""
        trt = api.try_load(self.flavour)
        if trt is None:
            return None, None, "{} does not import ({})".format(api.FLAVOURS[self.flavour], _install(self.flavour))
        return trt, gpu_probe.probe(), None

    def availability(self):
        trt, gpu, missing = self._module_and_gpu()
        if trt is None:
            return False, missing
        if gpu is None:
            return False, "{} {} is installed but there is no NVIDIA GPU".format(self.flavour, trt.__version__)
        return True, "{} {} on {} (SM {})".format(self.flavour, trt.__version__, gpu["name"],
                                                  gpu["compute_capability"])

    def build(self, onnx_path, precision, out_path, inputs=None, calibration=None):
        inputs = inputs or BuildInputs()
        options = inputs.tensorrt or TensorRTOptions()
        if options.via == "torch2trt":
            from trtkit.backends.tensorrt.torch2trt_path import build_with_torch2trt
            return build_with_torch2trt(self.flavour, precision, out_path, inputs, options, calibration)
        from trtkit.backends.tensorrt.builder import build_engine
        return build_engine(self.flavour, onnx_path, precision, out_path, inputs, calibration)

    def runner(self, artifact_path, options=None):
        from trtkit.backends.tensorrt.runner import TensorRTRunner
        return TensorRTRunner(artifact_path, self.flavour, options)

    def onnx_parser_version(self):
        """The installed TensorRT's version (its parser's highest opset caps the export); None for
        TensorRT-RTX, whose 1.x numbers are not TensorRT's (``trtkit.onnx.opsets`` has no row for it)."""
        if self.flavour != "tensorrt":
            return None
        trt = api.try_load(self.flavour)
        return trt.__version__ if trt is not None else None


    def nms_placement(self):
        """In the engine from TensorRT 8.5, whose ONNX parser maps NonMaxSuppression to its INMSLayer (the
        onnx-tensorrt changelog: "native support for the NonMaxSuppression operator" in 8.5; 8.0-8.4 had an
        experimental plugin path, and EfficientNMS on the Nano's 8.2 returns wrong scores), else on the host."""
        from trtkit.versions import parse_version
        version = self.onnx_parser_version()
        if version is not None and parse_version(version, length=2, what="TensorRT version") >= (8, 5):
            return "graph", "TensorRT {} parses NonMaxSuppression into its INMSLayer".format(version)
        return "host", "TensorRT {} has no NonMaxSuppression layer before 8.5: the host selects (numpy)".format(
            version or "(not installed)")


class TensorRTRTXBackend(TensorRTBackend):
    name = "tensorrt-rtx"
    flavour = "tensorrt-rtx"

    def nms_placement(self):
        """Measured with TensorRT-RTX 1.7: the parser reads NonMaxSuppression but the builder refuses it ("has
        no runners that implement it")."""
        return "host", "TensorRT-RTX has no runner for NonMaxSuppression: the host selects (numpy)"

    @property
    def auto_selectable(self):
        """auto picks TensorRT-RTX only where it can also run the engines: a GPU it has a target for."""
        trt, gpu, _ = self._module_and_gpu()
        return trt is not None and gpu is not None and api.rtx_supports(trt, gpu["compute_capability"])

    @property
    def auto_skip_reason(self):
        trt, gpu, missing = self._module_and_gpu()
        if trt is None:
            return missing
        if gpu is None:
            where = "no NVIDIA GPU here"
        else:
            where = "TensorRT-RTX {} has no target for {} (SM {}; it builds for SM {})".format(
                trt.__version__, gpu["name"], gpu["compute_capability"], ", ".join(api.rtx_targets(trt)))
        return "{}: engines could be built but not run (--backend tensorrt-rtx builds them anyway)".format(where)

    def availability(self):
        trt, gpu, missing = self._module_and_gpu()
        if trt is None:
            return False, missing
        if gpu is None:
            return True, "TensorRT-RTX {} builds ahead of time; no GPU here, so engines are built, not run".format(
                trt.__version__)
        return True, "TensorRT-RTX {} on {} (SM {})".format(trt.__version__, gpu["name"], gpu["compute_capability"])


def _install(flavour):
    from trtkit.deps import install_hint
    return install_hint(api.FLAVOURS[flavour])
