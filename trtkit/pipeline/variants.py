"""The one recipe that turns an FP32 ONNX into its precision variants: FP32, FP16, INT8 and mixed INT8.

Every caller that needs a variant (the build, the precision search, ``trtkit
calibrate``) asks a ``VariantMaker``; none of them writes the steps out again.
INT8 is where the recipe matters: calibrate on the *train* split (verification
uses the held-out one) -> Q/DQ ONNX in the backend's encoding -> TensorRT
calibration cache -> JSON report -> a ``Variant`` carrying its manifest fields
and the ``Int8Calibration`` the backend receives. A new range method or Q/DQ
encoding changes this module and reaches every caller.

A ``Variant`` is the graph before any engine is built; the build turns it into
the manifest's artifact record once a backend has built it.
"""

import os

from trtkit.fileio import atomic_path, write_json
from trtkit.onnx.write import save
from trtkit.precision.config import CalibrationConfig


class Variant(object):
    """One ONNX variant of the FP32 graph.

    ``label`` names its files and artifact (``fp16``, ``int8``, ``int8-percentile``, ``mixed-k3``);
    ``precision`` is what it computes in (fp32, fp16, int8, mixed); ``onnx_path`` its graph; ``meta`` the
    fields it adds to its manifest record; ``calibration`` the ``Int8Calibration`` of quantized variants
    (None otherwise); ``tune`` the precision search's figures on the tune split (empty outside the search).
    """

    def __init__(self, label, precision, onnx_path, meta=None, calibration=None, tune=None):
        self.label = label
        self.precision = precision
        self.onnx_path = onnx_path
        self.meta = dict(meta or {})
        self.calibration = calibration
        self.tune = dict(tune or {})

    def __repr__(self):
        return "Variant({}, {}, {})".format(self.label, self.precision, os.path.basename(self.onnx_path))


class Int8Files(object):
    """The names of the files one INT8 calibration writes: Q/DQ ONNX (None: not written), TensorRT cache,
    report. ``Int8Files.of(name, label)`` is the build's scheme: ``NAME.LABEL.onnx``, ``NAME.LABEL.calib.cache``,
    ``NAME.LABEL.calibration.json``."""

    def __init__(self, onnx, cache, report):
        self.onnx = onnx
        self.cache = cache
        self.report = report

    @classmethod
    def of(cls, name, label):
        prefix = "{}.{}".format(name, label)
        return cls(prefix + ".onnx", prefix + ".calib.cache", prefix + ".calibration.json")


def float_layer_record(qdq_model):
    """{"float", "weighted", "names"}: how many of a Q/DQ graph's (a ModelProto or its path) layers with weights
    run in float (a reader of the manifest sees how much of an "int8" variant is float)."""
    from trtkit.precision.depthwise import float_layers
    if isinstance(qdq_model, str):
        from trtkit.deps import require
        qdq_model = require("onnx", "reading the INT8 ONNX").load(qdq_model)
    names, total = float_layers(qdq_model)
    return {"float": len(names), "weighted": total, "names": names}


class VariantMaker(object):
    """Makes the variants of one FP32 ONNX into ``out_dir``.

    ``name`` prefixes the files; ``contract`` is the model's InputContract (how calibration images are
    preprocessed); ``calibration`` a CalibrationConfig; ``default_data`` the image source when the config
    names none (the build's ``--data``); ``encoding`` the Q/DQ encoding the backend reads
    (``Backend.int8_encoding``: ``tensorrt`` or ``cpu``); ``images``: the calibration images when the caller
    chose them (a ``data.Selection``: the build's ``data.plan``), else drawn from the source's train split.
    """

    def __init__(self, fp32_onnx, name, contract, calibration, default_data, encoding, out_dir, images=None):
        self.fp32_onnx = fp32_onnx
        self.name = name
        self.contract = contract
        self.config = calibration or CalibrationConfig()
        self.data = self.config.data_or(default_data)
        self.encoding = encoding
        self.out_dir = out_dir
        self.target = None  # the CPU the ``cpu`` encoding is for (vnni/avx2: its weight type), None otherwise
        if encoding == "cpu":
            from trtkit.cpuinfo import resolve_target
            self.target = resolve_target(self.config.cpu_isa)
        self._images = images
        self._fp32_model = None
        self._depthwise = {}  # measured depthwise rules by the ranges they were measured with
        self._corrections = {}  # bias corrections (precision.biascorr.Correction) by the ranges they were made for
        self._calibrated = {}  # calibration results by method
        self._rounded = None  # (path, precision.adaround.Rounding) of the graph with learned weight rounding
        self._equalized = None  # (path, record) of the equalized FP32 graph INT8 starts from (precision.equalize)
        self._qat = None  # (PyTorch model, steps, output kind): INT8 by quantization-aware fine-tuning (``use_qat``)

    def use_qat(self, torch_model, steps, output_kind=None):
        """Make the plain INT8 variant by quantization-aware fine-tuning of ``torch_model`` for ``steps``
        (``qat_int8``) instead of calibrating the FP32 graph; mixed variants still start from calibration."""
        self._qat = (torch_model, int(steps), output_kind)

    def make(self, precision):
        """The variant of a plain precision (fp32, fp16, int8 by the config's method)."""
        if precision == "fp32":
            return self.fp32()
        if precision == "fp16":
            return self.fp16()
        if precision == "int8":
            return self.int8()
        from trtkit.errors import InputError
        raise InputError("no recipe makes a '{}' variant on its own".format(precision),
                         hint="mixed INT8 comes from --precision auto")

    def fp32(self):
        return Variant("fp32", "fp32", self.fp32_onnx)

    def fp16(self):
        from trtkit.precision.fp16 import convert_fp16
        path = self._path("{}.fp16.onnx".format(self.name))
        kept = convert_fp16(self.fp32_onnx, path)
        return Variant("fp16", "fp16", path, {"kept_fp32_ops": kept})

    def calibration_images(self):
        """The calibration images (seeded, train split), a stream shared by every INT8 variant of the maker."""
        if self._images is None:
            from trtkit.precision.calibrate import calibration_selection
            self._images = calibration_selection(self.data, self.contract, self.config.images, seed=self.config.seed)
        return self._images

    def calibrate(self, method=None):
        """Ranges of every activation by ``method`` (default: the config's); cached on disk
        (``precision.calibrate``) and kept by the maker, so a later step (the build's ``--report``) does not
        calibrate again, with ``--no-calib-cache`` neither."""
        from trtkit.precision.calibrate import calibrate
        method = method or self.config.method
        source = self.int8_source()[0]  # adaround-q calibrates before it learns: its ranges are kept
        if method not in self._calibrated:
            images = self.calibration_images()
            self._calibrated[method] = calibrate(source, images, method,
                                                 self.config.batch_for(len(images)), self.config.percentile,
                                                 use_cache=self.config.use_cache)
        return self._calibrated[method]

    def int8(self, method=None, label="int8", files=None, result=None):
        """Calibrate (or take ``result``), write the Q/DQ ONNX, TensorRT cache and report; returns the Variant.

        ``files`` (an Int8Files) names what is written; ``files.onnx`` None writes no Q/DQ ONNX (the variant's
        ``onnx_path`` is then None: ``trtkit calibrate`` without ``--write-qdq``).
        """
        if self._qat is not None and method is None and label == "int8" and files is None and result is None:
            return self.qat_int8()
        from trtkit.precision.calibrate import Int8Calibration, save_qdq
        from trtkit.precision.trt_cache import write_cache
        files = files or Int8Files.of(self.name, label)
        result = result or self.calibrate(method)
        onnx_path = None
        if files.onnx:
            kept, depthwise = self.float_depthwise(result.ranges)
            correction = self.bias_correction(result.ranges)
            onnx_path = save_qdq(self.int8_source()[0] if correction is None else correction.model, result.ranges,
                                 self.encoding, self._path(files.onnx), self.target, kept)
            rounding = self.rounding_record(onnx_path)
        cache_path = self._path(files.cache)
        write_cache(cache_path, result.amax(), result.method, self.config.trt_version)
        report = dict(result.report, source=str(self.data), split=self.calibration_images().split,
                      trt_calibration_cache=files.cache)
        if onnx_path:
            report.update(encoding=self.encoding, int8_onnx=files.onnx, float_depthwise=depthwise,
                          float_layers=float_layer_record(onnx_path),
                          bias_correction=correction.record if correction else {"rule": "off"}, rounding=rounding)
        write_json(self._path(files.report), report)
        meta = {"calibration": {"method": result.method, "images": report["images"], "data": str(self.data),
                                "report": files.report, "trt_calibration_cache": files.cache,
                                "cache_reused": result.reused, "seconds": report["seconds"]["total"],
                                "rules": report["rules"]}}
        if onnx_path:
            meta["int8_encoding"] = self.encoding
            meta["float_depthwise"] = depthwise
            meta["float_layers"] = report["float_layers"]
            meta["bias_correction"] = dict((k, v) for k, v in report["bias_correction"].items() if k != "rows")
            meta["equalize"] = self.int8_source()[1]
            meta["rounding"] = dict((k, v) for k, v in rounding.items() if k != "rows")
            if self.target:
                from trtkit.cpuinfo import this_cpu, weight_type
                meta["isa"] = {"target": self.target, "weight_type": weight_type(self.target),
                               "made_on": this_cpu().describe()}
        calibration = Int8Calibration(result, self.calibration_images(), cache_path)
        return Variant(label, "int8", onnx_path, meta, calibration)

    def qat_int8(self, label="int8"):
        """The INT8 variant by ``precision.qat.run_qat``: scales from the calibration images, fine-tuned on the
        calibration source's labelled train split, the Q/DQ ONNX in the ``tensorrt`` encoding (its placement
        checked; ONNX Runtime and OpenVINO run it too), its report beside it; the manifest records how INT8 was
        made (``int8_method``: qat)."""
        from trtkit.data import ImageSet, select
        from trtkit.errors import InputError
        from trtkit.precision.qat import run_qat
        from trtkit.precision.qat import DEFAULT_BATCH, MAX_TRAIN_IMAGES
        model, steps, output_kind = self._qat
        # the images the steps see, drawn by the calibration seed, at most MAX_TRAIN_IMAGES: memory bounded by the
        # fine-tune, not by the size of the user's training folder
        wanted = min(MAX_TRAIN_IMAGES, max(1, steps) * DEFAULT_BATCH)
        train = select(self.data, self.contract, split="train", limit=wanted, seed=self.config.seed).load(
            progress=False)
        if train.labels is None or (train.labels < 0).any():
            raise InputError("--qat-steps needs labelled training images and {} has none".format(self.data),
                             hint="give --calib-data a folder of class sub-folders (or drop --qat-steps)")
        calibration = self.calibration_images()
        calibration = calibration if isinstance(calibration, ImageSet) else calibration.load(progress=False)
        files = Int8Files.of(self.name, label)
        compared = ImageSet(calibration.images[:128], None, calibration.identity)
        report = run_qat(model, self.contract, train, calibration.images, compared, steps,
                         self._path(files.onnx), method=self.config.method, seed=self.config.seed,
                         opset=self._qat_opset(), output_kind=output_kind)
        report.update(source=str(self.data), runtimes_compared_on="the first {} calibration images".format(
            len(compared.images)))
        write_json(self._path(files.report), report)
        meta = {"int8_method": "qat", "int8_encoding": "tensorrt", "float_layers": float_layer_record(
            self._path(files.onnx)), "qat": {"steps": steps, "report": files.report, "data": str(self.data),
                                             "quantized_tensors": report["quantized_tensors"],
                                             "runtimes": report["runtimes"], "seconds": report["seconds"]}}
        return Variant(label, "int8", self._path(files.onnx), meta)

    def _qat_opset(self):
        """The FP32 graph's opset when it is below the TorchScript exporter's default (a build for an older
        TensorRT parser chose it), else that default: the QAT graph is read by the same parser."""
        from trtkit.deps import require
        from trtkit.onnx.opsets import DEFAULT_OPSET
        model = require("onnx", "reading the FP32 ONNX").load(self.fp32_onnx, load_external_data=False)
        found = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
        return min(found[0], DEFAULT_OPSET) if found else DEFAULT_OPSET

    def mixed_graph(self, ranges, keep_float):
        """The in-memory Q/DQ ModelProto with the layers in ``keep_float`` left in float (search trials)."""
        from trtkit.precision.qdq import write_qdq
        correction = self.bias_correction(ranges)
        source = self.fp32_model() if correction is None else correction.without(keep_float)
        if self._rounded is not None:  # the float layers keep their trained weights
            source = self._rounded[1].without(source, keep_float)
        return write_qdq(source, ranges, self.encoding, keep_float=set(keep_float), target=self.target,
                         float_depthwise=self.float_depthwise(ranges)[0])

    def float_depthwise(self, ranges):
        """(``write_qdq``'s ``float_depthwise`` under the config's rule with ``ranges``, the record of it for the
        manifest: None when off). ``measured`` runs ``precision.depthwise.measure_depthwise`` on the first
        ``MEASURE_IMAGES`` calibration images, once per ranges."""
        rule = self.config.float_depthwise
        if rule == "off":
            return False, None
        if rule == "all":
            return True, {"rule": "all"}
        from trtkit.precision.depthwise import MEASURE_IMAGES, measure_depthwise
        key = _ranges_key(ranges)
        if key not in self._depthwise:
            first = self._first_images(MEASURE_IMAGES)
            self._depthwise[key] = measure_depthwise(self.fp32_model(), first, ranges, self.encoding)
        measured = self._depthwise[key]
        return measured["kept"], measured

    def bias_correction(self, ranges):
        """The ``precision.biascorr.Correction`` of the INT8 graph written with ``ranges`` (the encoding, CPU
        target and float depthwise convs of this maker), measured on the first ``biascorr.IMAGES`` calibration
        images, once per ranges; None when the config's rule is ``off``."""
        if self.config.bias_correction == "off":
            return None
        key = _ranges_key(ranges)
        if key not in self._corrections:
            from trtkit.precision import biascorr
            from trtkit.precision.qdq import write_qdq
            encoding, kept = self.encoding or "tensorrt", self.float_depthwise(ranges)[0]
            images = self._first_images(biascorr.IMAGES)
            self._corrections[key] = biascorr.correct_biases(
                self.fp32_model(), ranges, images,
                lambda model: write_qdq(model, ranges, encoding, target=self.target, float_depthwise=kept), encoding)
            from trtkit import log
            record = self._corrections[key].record
            log.info("bias correction: {} of {} layers ({} of {} channels){} in {:.1f}s".format(
                record["layers"] if record["kept"] else 0, record["candidates"], record["channels"],
                record["of_channels"], "" if record["kept"] else ", dropped: " + record.get("why_not", "nothing to do"),
                record["seconds"]))
        return self._corrections[key]

    def _first_images(self, count):
        """The first ``count`` calibration images, one NCHW array."""
        images = self.calibration_images()
        batches = images.batches(count) if hasattr(images, "images") else images.batches(count, progress=False)
        return next(iter(batches))[0]

    def fp32_model(self):
        """The FP32 ModelProto INT8 graphs are written from (``int8_source``), loaded once (the search writes many
        trial graphs from it)."""
        if self._fp32_model is None:
            from trtkit.deps import require
            self._fp32_model = require("onnx", "writing the INT8 ONNX").load(self.int8_source()[0])
        return self._fp32_model

    def int8_source(self):
        """(path, record) of the FP32 graph INT8 is calibrated and written from: the FP32 ONNX, or under the
        config's ``equalize`` rule its equalized copy (``precision.equalize``, measured on the first
        ``equalize.IMAGES`` calibration images and kept where its INT8 outputs are closer to FP32, written once as
        ``NAME.equalized.onnx``), and under the ``rounding`` rules ``adaround``/``adaround-q`` that graph with its
        weights on their learned INT8 levels (``rounded``); record (the equalization's) None when off."""
        path, record = self._equalized_source()
        if self.config.rounding == "nearest":
            return path, record
        return self.rounded(path)[0], record

    def rounded(self, source):
        """(path, ``precision.adaround.Rounding``) of ``source`` with learned weight rounding, learned once on the
        first ``adaround.IMAGES`` calibration images for the writer's INT8 layers and written as
        ``NAME.adaround.onnx``: calibration then measures the graph as it will run, and every writer
        (encoding, bias correction, mixed) quantizes these weights back to the learned integers."""
        if self._rounded is None:
            from trtkit import log
            from trtkit.deps import require
            from trtkit.precision import adaround
            from trtkit.precision.qdq import quantizable_layers
            model = require("onnx", "AdaRound").load(source)
            layers = set(name for name, _ in quantizable_layers(model, self.encoding or "tensorrt",
                                                                 self.config.float_depthwise == "all"))
            done = adaround.learn_rounding(model, self._first_images(adaround.IMAGES), layers, seed=self.config.seed,
                                           quantized=self._quantized_writer(source, layers))
            record = done.record
            log.info("AdaRound: {} of {} layers learned ({} of {} weights moved off nearest; held-out output "
                     "error {:.2f}x nearest's) in {:.1f}s".format(
                         record["layers"], record["candidates"], record["weights_changed"], record["of_weights"],
                         record["mean_check_error"] or 1.0, record["seconds"]))
            path = self._path("{}.adaround.onnx".format(self.name))
            save(done.model, path)
            self._rounded = (path, done)
        return self._rounded

    def _quantized_writer(self, source, layers):
        """None (``adaround``), or for ``adaround-q`` the writer of the INT8 graph each layer learns its rounding
        on: ``source`` calibrated first by the config's method (those ranges are the variant's: ``calibrate``
        keeps them), trtkit's own placement for the encoding with those ranges, the ``layers`` quantized."""
        if self.config.rounding != "adaround-q":
            return None
        from trtkit.precision.calibrate import calibrate
        from trtkit.precision.qdq import write_qdq_of
        images, method = self.calibration_images(), self.config.method
        result = calibrate(source, images, method, self.config.batch_for(len(images)), self.config.percentile,
                           use_cache=self.config.use_cache)
        self._calibrated[method] = result
        ranges, encoding = result.ranges, self.encoding or "tensorrt"
        return lambda model: write_qdq_of(model, ranges, encoding, tensors=set(ranges), layers=layers,
                                          target=self.target)

    def rounding_record(self, qdq_path):
        """The report's ``rounding``: {"rule": "nearest"}, or AdaRound's record (each layer's row) with how many of
        its layers the written Q/DQ graph at ``qdq_path`` runs on exactly the learned integers (``realised``;
        a layer left float, or whose scale a writer widened, is named in ``not_realised``)."""
        if self._rounded is None:
            return {"rule": self.config.rounding}
        from trtkit.deps import require
        from trtkit.precision.adaround import realised
        done = self._rounded[1]
        same, other = realised(require("onnx", "reading the INT8 ONNX").load(qdq_path), done)
        record = dict(done.record, realised=same, not_realised=other)
        if other:
            from trtkit import log
            log.warn("AdaRound: {} layer(s) do not run on their learned integers in {} (float, or a writer chose "
                     "another scale): {}".format(len(other), os.path.basename(qdq_path), ", ".join(other[:5])))
        return record

    def _equalized_source(self):
        """(path, record) of the FP32 graph or, under ``equalize``, its equalized copy (see ``int8_source``)."""
        if self.config.equalize == "off":
            return self.fp32_onnx, None
        if self._equalized is None:
            from trtkit import log
            from trtkit.deps import require
            from trtkit.precision import equalize
            onnx = require("onnx", "INT8 equalization")
            from trtkit.precision.qdq import write_qdq
            encoding, whole = self.encoding or "tensorrt", self.config.float_depthwise == "all"
            done = equalize.equalize(onnx.load(self.fp32_onnx), self._first_images(equalize.IMAGES),
                                     self.config.equalize, method=self.config.method,
                                     write=lambda model, ranges: write_qdq(model, ranges, encoding, target=self.target,
                                                                           float_depthwise=whole))
            record = done.record
            log.info("equalization ({}): {} of {} channels in {} conv pairs scaled{} in {:.1f}s".format(
                record["rule"], record["channels"], record["of_channels"], record["pairs"],
                "" if record["kept"] else ", dropped: " + record.get("why_not", "nothing to do"), record["seconds"]))
            path = self.fp32_onnx
            if record["kept"]:
                path = self._path("{}.equalized.onnx".format(self.name))
                save(done.model, path)
            self._equalized = (path, record)
        return self._equalized

    def mixed(self, base, kept_layers, graph=None, tune=None, kept_in="fp32"):
        """The mixed INT8 Variant of the INT8 variant ``base`` with ``kept_layers`` in float (``graph``: the
        trial's FP32-kept ModelProto when the search already made it).

        ``kept_in`` is the precision of the kept layers: ``fp32``, or ``fp16`` (for TensorRT, where FP16 is
        the fast float; labelled ``mixed-kN-fp16``).
        """
        from trtkit.deps import require
        require("onnx", "writing the INT8 ONNX")
        if graph is None:
            graph = self.mixed_graph(base.calibration.result.ranges, kept_layers)
        label = "mixed-k{}".format(len(kept_layers))
        if kept_in == "fp16":
            from trtkit.precision.fp16 import layers_to_fp16
            graph = layers_to_fp16(graph, kept_layers)
            label += "-fp16"
        elif kept_in != "fp32":
            raise ValueError("kept_in is fp32 or fp16, not {!r}".format(kept_in))
        path = self._path("{}.{}.onnx".format(self.name, label))
        with atomic_path(path) as tmp:
            save(graph, tmp)
        meta = dict(base.meta, kept_layers=list(kept_layers), kept_in=kept_in, mixed_from=base.label,
                    float_layers=float_layer_record(graph))
        return Variant(label, "mixed", path, meta, base.calibration, tune)

    def _path(self, file_name):
        return os.path.join(self.out_dir, file_name)


def _ranges_key(ranges):
    return hash(tuple(sorted((n, r["amax"], r["min"], r["max"]) for n, r in ranges.items())))
