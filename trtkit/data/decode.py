"""Image files -> model inputs: open with PIL, decode (JPEG draft where it pays), preprocess; a small thread pool.

PIL releases the GIL while it decodes and resizes, so a few threads decode
files in parallel without the cost of processes (no pickling of arrays).
``imap_ordered`` keeps results in input order with a bounded number in flight,
so memory stays a few images per worker whatever the folder's size.

JPEG draft mode: when the image is at least twice the size it will be resized
to, libjpeg decodes it at 1/2, 1/4 or 1/8 scale directly (DCT scaling), which
is several times faster for large photos. The result differs slightly from a
full decode followed by the resize (a few grey levels on edges); the geometry
(resize size, crop offsets) is still computed from the full image's size.
Every step of trtkit decodes through here, so they all see the same pixels.
"""

import collections
import hashlib
import os

import numpy as np

from trtkit.data.preprocess import preprocess, resize_target
from trtkit.deps import require

DEFAULT_WORKERS = 4  # PIL decoding scales to a few threads; more contend for the GIL between decodes


def default_workers():
    return max(1, min(DEFAULT_WORKERS, os.cpu_count() or 1))


def imap_ordered(function, items, workers, ahead=None):
    """``function(item)`` for each item, yielded in order; at most ``ahead`` computed ahead of the reader."""
    if workers <= 1:
        for item in items:
            yield function(item)
        return
    from concurrent.futures import ThreadPoolExecutor
    ahead = ahead or 4 * workers
    pending = collections.deque()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        try:
            for item in items:
                pending.append(pool.submit(function, item))
                if len(pending) >= ahead:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:  # a reader that stops early does not wait for decodes it will not use
                future.cancel()


def read_image(path, contract, draft=True):
    """Decode ``path`` and preprocess it for ``contract``: float32 (C, H, W). Raises what PIL raises."""
    return read_image_sized(path, contract, draft)[0]


def read_image_sized(path, contract, draft=True):
    """``read_image`` and the image's own size (w, h), upright when the contract applies EXIF orientation, before
    any draft or resize: (array, (w, h)).

    ``draft``: a large JPEG is decoded at 1/2..1/8 of its size by libjpeg's DCT scaling (several times faster,
    never below the resize target) before PIL's resize. Calibration and verification use it (both sides of a
    comparison see the same pixels); ``predict``, ``load`` and ``serve`` do not: measured on an EfficientNet-B0
    from a package that decodes whole (torchvision's PIL pipeline), the draft moved its probability by up to
    0.18 on large photos (no decision changed in 53)."""
    Image = require("PIL.Image", "reading image files")
    with Image.open(path) as image:
        tag = exif_orientation(image)
        original = upright_size(image, contract, tag)
        turned = original != image.size
        opencv_grey = contract.channels == 1 and contract.resize_filter == "opencv"
        if draft and image.format == "JPEG" and contract.resize_filter == "pil":  # a draft shrinks by area
            target = resize_target(original, contract)  # of the upright image; a turned one is stored across
            image.draft(None, target[::-1] if turned else target)
        elif opencv_grey and image.format == "JPEG" and image.mode != "L":
            image.draft("L", image.size)  # libjpeg's own grey output, as cv2.imread(IMREAD_GRAYSCALE) asks for
        image.load()
        picture = upright(image, contract, path, tag)  # turning makes a copy without the file's format
        if opencv_grey:
            picture = _libpng_grey(picture, image.format)
        return preprocess(picture, contract, original_size=original), original


def _libpng_grey(image, file_format):
    """A colour PNG made grey as ``cv2.imread(path, cv2.IMREAD_GRAYSCALE)`` makes it (libpng's rgb_to_gray with
    OpenCV's 0.299/0.587 in libpng's 15-bit fixed point, truncated), other images as they are. Measured on a
    captcha reader fed by cv2.imread: PIL's own grey conversion was up to 16 levels from OpenCV's on JPEGs (the
    chroma round trip; ``draft("L")`` decodes the luma alone, as OpenCV asks libjpeg to) and 1-2 on PNGs."""
    if file_format != "PNG" or image.mode not in ("RGB", "RGBA"):
        return image
    rgb = np.asarray(image.convert("RGB"), dtype=np.uint32)
    grey = (rgb[..., 0] * 9797 + rgb[..., 1] * 19234 + rgb[..., 2] * 3737) >> 15
    return require("PIL.Image", "reading image files").fromarray(grey.astype(np.uint8), "L")


TURNING = (5, 6, 7, 8)  # EXIF orientations that swap width and height


def upright_size(image, contract, tag=None):
    """(w, h) of ``image`` as the model sees it: across when the contract applies an EXIF tag that turns it."""
    tag = exif_orientation(image) if tag is None else tag
    turned = contract.exif_orientation == "apply" and tag in TURNING
    return (image.size[1], image.size[0]) if turned else image.size


def exif_orientation(image):
    """The EXIF orientation tag of a PIL image (1, upright as stored, when it has none or it cannot be read)."""
    try:
        return int(image.getexif().get(0x0112) or 1)
    except Exception:  # a corrupt EXIF block: the pixels as stored
        return 1


def upright(image, contract, name=None, tag=None):
    """``image`` turned upright by its EXIF orientation when ``contract.exif_orientation`` is ``apply`` (as
    OpenCV's imread does); else as stored (as PIL and torchvision do), with a warning the first time a photo
    carries a turning tag, since the model's own pipeline may read it either way."""
    tag = exif_orientation(image) if tag is None else tag
    if tag == 1:
        return image
    if contract.exif_orientation == "apply":
        return require("PIL.ImageOps", "reading image files").exif_transpose(image)
    if not _EXIF_WARNED:  # once per process, whichever file comes first
        from trtkit import log
        _EXIF_WARNED.append(tag)
        log.warn("photos with an EXIF orientation tag (the first: {}, tag {}) are used as stored, as PIL and "
                 "torchvision read them; OpenCV's imread turns them upright: if the model's own pipeline does, "
                 "pass --exif-orientation apply".format(name if isinstance(name, str) else "an image", tag))
    return image


_EXIF_WARNED = []


def describe_error(exc):
    """A short reason for a file PIL could not read: 'UnidentifiedImageError', 'OSError: truncated ...'."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if "cannot identify image file" in text:
        text = ""
    return "{}: {}".format(exc.__class__.__name__, text[:120]) if text else exc.__class__.__name__


class FileReader(object):
    """The image files of a folder listing: items are paths relative to ``root``."""

    kind = "folder"

    def __init__(self, root, draft=True):
        self.root = root
        self.draft = draft

    def name(self, item):
        return os.path.join(self.root, item)

    def fingerprint(self, items):
        """Digest of the files' names, sizes and modification times (no pixel is read)."""
        digest = hashlib.sha1(os.path.abspath(self.root).encode("utf-8"))
        for item in items:
            try:
                stat = os.stat(os.path.join(self.root, item))
                digest.update("{}\0{}\0{}\n".format(item, stat.st_size, stat.st_mtime_ns).encode("utf-8"))
            except OSError:
                digest.update("{}\0missing\n".format(item).encode("utf-8"))
        return digest.hexdigest()

    def check(self, contract):
        """Nothing to check before decoding: any image is preprocessed to any contract."""

    def read(self, items, contract, workers=None):
        """(array or None, reason) per item, in order; unreadable files give (None, reason)."""
        def one(item):
            try:
                return read_image(os.path.join(self.root, item), contract, self.draft), None
            except MemoryError:
                raise
            except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError... for broken files
                return None, describe_error(exc)
        return imap_ordered(one, items, workers or default_workers())
