"""What ``trtkit predict`` makes of a segmentation build's masks: files in ``--out`` and one record per image.

Per image, in ``--out``: ``<name>.mask.png``, the class-index mask as a palette
PNG (mode ``P``, Pascal VOC's colours: ``trtkit.app.palette``; the pixel values
are the class indices, 255 where the model saw nothing), and
``<name>.overlay.png``, the photo with the class colours blended in at half
opacity, both at the photo's own size. ``<name>`` is the image's path relative
to the folder all images share, without its extension (``photos/a/x.jpg`` ->
``a/x``); images that would share a name keep their extension in it
(``x_jpg``, ``x_png``). Every file is written atomically.

``record`` is the per-image summary the table and ``--json`` print: size,
coverage, each class's share of the seen pixels (summing to 1) and the
largest ones.
"""

import collections
import os

from trtkit.app import maps

MASK_SUFFIX = ".mask.png"
OVERLAY_SUFFIX = ".overlay.png"


def output_names(files):
    """A unique output name per image file (see the module doc), in order."""
    absolute = [os.path.abspath(f) for f in files]
    if not absolute:
        return []
    root = os.path.commonpath([os.path.dirname(a) for a in absolute])
    relative = [os.path.relpath(a, root) for a in absolute]
    names = [os.path.splitext(r)[0] for r in relative]
    sources = collections.defaultdict(set)
    for name, path in zip(names, relative):
        sources[name].add(path)
    names = [n if len(sources[n]) == 1 else n + "_" + os.path.splitext(r)[1].lstrip(".").lower()
             for n, r in zip(names, relative)]
    seen = collections.Counter()
    unique = []
    for name in names:  # the same file twice, or x.JPG beside x.jpg
        seen[name] += 1
        unique.append(name if seen[name] == 1 else "{}_{}".format(name, seen[name]))
    return unique


class MaskWriter(object):
    """Writes each image's mask and overlay into ``out`` (a folder that exists); ``contract``: the build's, whose
    EXIF handling the overlay's photo follows (upright as the model saw it)."""

    def __init__(self, out, files, contract=None):
        self.out = out
        self.names = dict(zip(files, output_names(files)))
        self.contract = contract

    def write(self, path, mask):
        """Write the mask and the overlay of image file ``path``; returns their paths."""
        from trtkit.app.palette import encode_png, mask_image, overlay
        from trtkit.data.decode import upright
        from trtkit.data.preprocess import _pil
        from trtkit.fileio import write_bytes
        base = os.path.join(self.out, self.names[path])
        written = (base + MASK_SUFFIX, base + OVERLAY_SUFFIX)
        write_bytes(written[0], encode_png(mask_image(mask)))
        with _pil().open(path) as photo:
            photo.load()
            if self.contract is not None:
                photo = upright(photo, self.contract)
            write_bytes(written[1], encode_png(overlay(photo, mask)))
        return written


def record(label, mask, model, top_k):
    """The summary of one image's mask: ``image``, ``width``, ``height``, ``coverage`` (the share of its pixels
    the model saw), ``fractions`` (per class index, summing to 1 over the seen pixels) and ``top`` (the ``top_k``
    largest: ``class``, ``name``, ``fraction``)."""
    fractions = model.fractions(mask)
    return {"image": label, "width": int(mask.shape[1]), "height": int(mask.shape[0]),
            "coverage": round(maps.coverage(mask), 6), "fractions": [round(float(f), 6) for f in fractions],
            "top": [{"class": c, "name": n, "fraction": round(f, 6)}
                    for c, n, f in maps.top_classes(fractions, top_k, model.class_names)]}
