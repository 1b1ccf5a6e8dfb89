"""Decoders of foreign detectors' raw heads: the vocabulary of ``--decoder`` and ``--decoder-param``.

A detector trtkit did not export ends in raw heads that its own package decodes in Python (anchor offsets,
distance distributions, centre-size rows). A decoder family turns such outputs into trtkit's ``decoded``
``[N, A, 4 + C]`` (``detect.raw``) by appending weightless ONNX nodes to the graph (``graph.append_decoder``),
so the rest of trtkit builds the adapted graph as one it exported itself. Each family (one module each)
has:

- ``infer(outputs, input_hw, given)``: the filled parameters, read from the outputs' names and shapes where
  they can be told and checked against what was given; one ``InputError`` line when they cannot;
- ``tail(tail, params, input_hw)``: the ONNX nodes (``base.Tail``), FP32, no weights;
- ``reference(arrays, params, input_hw)``: the same decode in numpy, written from the family's published
  definition (tests hold the tail to it);
- ``postprocessing(params)`` and ``background(params)``: the selection its package applies by default;
- and, for a family that reads more than the outputs (``nms``: the graph's own NonMaxSuppression),
  ``cut(model, given)``: the graph cut where the family reads it, and ``given`` over what was read there.

Only numpy is imported here; onnx when a tail is written.
"""

from trtkit.detect.decoders.base import DecoderSpec
from trtkit.detect.decoders.bestk import TopK
from trtkit.detect.decoders.dfl import Dfl
from trtkit.detect.decoders.nms import Nms
from trtkit.detect.decoders.priors import Priors
from trtkit.detect.decoders.yolo import Yolo
from trtkit.errors import InputError

__all__ = ["DecoderSpec", "FAMILIES", "family", "names", "parse_params", "raw_names"]

FAMILIES = dict((family.name, family) for family in (Yolo(), Dfl(), Priors(), Nms(), TopK()))


def names():
    return sorted(FAMILIES)


def raw_names():
    """The families that read raw heads (all but those that cut a graph's own selection: ``nms``, ``topk``)."""
    return [name for name in names() if not hasattr(FAMILIES[name], "cut")]


def family(name):
    """The decoder called ``name``; unknown names are refused with the list."""
    found = FAMILIES.get(str(name).strip().lower())
    if found is None:
        raise InputError("unknown decoder '{}'".format(name), hint="use one of " + "|".join(names()) + ", or your own Python function: module:function")
    return found


def parse_params(values):
    """``--decoder-param`` values (``["k=v", ...]``, one ``"k=v"``, or a dict) -> {key: value string}."""
    if values is None:
        return {}
    if isinstance(values, dict):
        return dict((str(k), v) for k, v in values.items())
    if isinstance(values, str):
        values = [values]
    found = {}
    for item in values:
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise InputError("--decoder-param {!r} is not KEY=VALUE".format(item), hint="e.g. strides=8,16,32")
        found[key.strip()] = value.strip()
    return found
