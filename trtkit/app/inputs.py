"""What ``predict`` (Classifier, Segmenter) accepts, turned into model inputs by the build's contract, in bounded
memory, with each image's own size (a Segmenter's masks go back to it).

An input is a file path (str or ``os.PathLike``), the bytes of an image file, a PIL image, a uint8 array
(HxW or HxWxC with C = 1 or 3: one image; NxHxWxC: N images), a float array
(CxHxW: one preprocessed image; NxCxHxW: a preprocessed batch), or a list or
tuple of them. Pixels go through ``trtkit.data.preprocess`` (the function every
build step uses), files through ``trtkit.data.decode.read_image`` (JPEG draft
included), so a file classified here gives the numbers verification saw.
Float arrays are taken as already preprocessed and must match the contract's
C x H x W.

``batches`` decodes a batch at a time with a few threads, never the whole
list: 100,000 file names need the memory of a few batches. A missing file or
one that is no image is an InputError naming it.
"""

import os

import numpy as np

from trtkit.errors import InputError

_KINDS_HINT = "pass image file paths, PIL images, uint8 HxWxC arrays or a float32 NxCxHxW batch"


def _is_pil(value):
    module = type(value).__module__ or ""
    return module.startswith("PIL.") and hasattr(value, "mode") and hasattr(value, "size")


def _is_path(value):
    return isinstance(value, str) or hasattr(value, "__fspath__")


def expand(inputs):
    """Yield (label, kind, value) per image: kind "path", "encoded" (bytes of an image file), "pixels" (PIL or
    uint8 array) or "float" (CHW)."""
    if isinstance(inputs, (list, tuple)):
        for item in inputs:
            for entry in expand(item):
                yield entry
    elif _is_path(inputs):
        path = os.fsdecode(os.fspath(inputs))
        yield path, "path", path
    elif isinstance(inputs, (bytes, bytearray)):
        yield "<encoded image>", "encoded", inputs
    elif _is_pil(inputs):
        yield "<PIL image>", "pixels", inputs
    elif isinstance(inputs, np.ndarray):
        for entry in _array(inputs):
            yield entry
    else:
        raise InputError("cannot classify a {}".format(type(inputs).__name__), hint=_KINDS_HINT)


def _array(array):
    shape = "x".join(str(d) for d in array.shape)
    if array.dtype.kind == "f":
        if array.ndim == 3:
            yield "<array>", "float", array
        elif array.ndim == 4:
            for row in array:
                yield "<array>", "float", row
        else:
            raise InputError("a float array of shape {} is no preprocessed image: expected CxHxW or NxCxHxW".format(
                shape), hint=_KINDS_HINT)
    elif array.dtype == np.uint8:
        if array.ndim == 2 or (array.ndim == 3 and array.shape[2] in (1, 3, 4)):
            yield "<array>", "pixels", array
        elif array.ndim == 4 and array.shape[3] in (1, 3, 4):
            for row in array:
                yield "<array>", "pixels", row
        else:
            raise InputError("a uint8 array of shape {} is no image: expected HxW, HxWxC or NxHxWxC with C 1, 3 "
                             "or 4".format(shape), hint="pass a list of images, or a float32 NxCxHxW batch")
    else:
        raise InputError("cannot classify a {} array: pixels are uint8, preprocessed inputs float".format(
            array.dtype), hint=_KINDS_HINT)


def _own_layout(contract):
    """', or H x W x C as the model's own NHWC input' when the model's own layout differs from trtkit's."""
    if contract.layout != "nhwc":
        return ""
    return ", or {} (H x W x C) as the model's own input".format(
        _dims((contract.height, contract.width, contract.channels)))


def prepare(entry, contract):
    """One (label, kind, value) -> (float32 (C, H, W) for ``contract``, the image's own size (w, h)); the size
    is None for an input given preprocessed."""
    label, kind, value = entry
    if kind == "float":
        from trtkit.contract import check_float_input, float_to_chw
        value = float_to_chw(value, contract)
        if tuple(value.shape) != contract.shape:
            raise InputError("a preprocessed image must be {} (C x H x W{}), got {}".format(
                _dims(contract.shape), _own_layout(contract), _dims(value.shape)),
                hint="pass uint8 pixels or files to let trtkit preprocess them with the build's contract")
        value = np.asarray(value, dtype=np.float32)
        check_float_input(value, contract, "a preprocessed image")
        return value, None
    if kind == "pixels":
        from trtkit.data.decode import upright
        from trtkit.data.preprocess import preprocess, to_pil
        image = to_pil(upright(value, contract) if _is_pil(value) else value)  # an array has no EXIF
        return preprocess(image, contract), image.size
    if kind == "encoded":
        return decode_bytes(value, contract)
    return read_file(value, contract)


def read_file(path, contract):
    """Decode and preprocess an image file: (float32 (C, H, W), its size (w, h)); InputError for a missing file
    or one that is no image."""
    from trtkit.data.decode import describe_error, read_image_sized
    if not os.path.isfile(path):
        raise InputError("image not found: {}".format(path), hint="check the path")
    try:  # decoded whole, as the model's own pipeline decodes it: a JPEG draft moved answers (read_image_sized)
        return read_image_sized(path, contract, draft=False)
    except MemoryError:
        raise
    except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError... for files it cannot read
        raise InputError("cannot read {} as an image ({})".format(path, describe_error(exc)),
                         hint="give JPEG, PNG, BMP, TIFF or WebP files")


def decode_bytes(data, contract):
    """An encoded image (JPEG, PNG, ... bytes) -> (float32 (C, H, W), its size (w, h)); InputError when it does
    not decode."""
    import io
    from trtkit.data.decode import describe_error, read_image_sized
    try:
        return read_image_sized(io.BytesIO(bytes(data)), contract, draft=False)
    except MemoryError:
        raise
    except Exception as exc:
        raise InputError("the image does not decode ({}, {} bytes)".format(describe_error(exc), len(data)),
                         hint="send encoded JPEG or PNG bytes")


def batches(inputs, contract, batch_size, workers=None, on_unreadable=None):
    """Yield (labels, float32 NCHW batch, sizes) of at most ``batch_size`` images, in input order, decoding as it
    goes; ``sizes``: each image's own (w, h), None for inputs given preprocessed. ``on_unreadable(path, error)``:
    a file that cannot be read is passed to it and left out (None: its InputError stops the run)."""
    from trtkit.data.decode import default_workers, imap_ordered
    labels, rows, sizes = [], [], []
    entries = expand(inputs)

    def load(entry):
        try:
            return entry[0], prepare(entry, contract)
        except InputError as exc:
            if on_unreadable is None or entry[1] != "path":
                raise
            return entry[0], exc

    for label, prepared in imap_ordered(load, entries, workers or default_workers(), ahead=2 * batch_size):
        if isinstance(prepared, InputError):
            on_unreadable(label, prepared)
            continue
        array, size = prepared
        labels.append(label)
        rows.append(array)
        sizes.append(size)
        if len(rows) == batch_size:
            yield labels, np.stack(rows), sizes
            labels, rows, sizes = [], [], []
    if rows:
        yield labels, np.stack(rows), sizes


def image_files(paths):
    """Image files named by ``paths``: files as given, folders expanded to their images (recursive, sorted).

    Returns (files, ignored): ``ignored`` counts the non-image files left out of folders.
    """
    from trtkit.data.sources import IMAGE_EXTENSIONS
    files, ignored = [], 0
    for path in paths:
        if os.path.isdir(path):
            found = []
            for folder, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(names):
                    if name.startswith("."):
                        continue
                    if name.lower().endswith(IMAGE_EXTENSIONS):
                        found.append(os.path.join(folder, name))
                    else:
                        ignored += 1
            if not found:
                raise InputError("no images in folder {}".format(path),
                                 hint="image files end in " + ", ".join(IMAGE_EXTENSIONS))
            files.extend(sorted(found))
        elif os.path.exists(path):
            files.append(path)
        else:
            raise InputError("image not found: {}".format(path), hint="check the path")
    return files, ignored


def _dims(shape):
    return "x".join(str(d) for d in shape)
