"""What ``trtkit predict`` makes of a detection build's answers: pictures and COCO JSON in ``--out``.

Per image, ``<name>.boxes.png``: the photo (upright as the model saw it, at its own size) with each detection's
box drawn in its class's colour and labelled with its class name and score (``palette.draw_boxes``); ``<name>``
as for masks (``mask_files.output_names``: the path below the folder all images share, without extension).

For the whole run, once every image is done:

- ``detections.json``: COCO's results format, ``[{"image_id", "category_id", "bbox": [x, y, w, h], "score"}]``,
  boxes in each image's own pixels (x, y: the top-left corner), ``category_id`` the model's class index (its
  name: ``images.json``), one detection per line; a face detector's landmarks as COCO's ``keypoints`` (x, y,
  2 per point);
- ``images.json``: ``{"images": [{"id", "file_name", "width", "height"}], "categories": [{"id", "name"}]}``, the
  half of a COCO annotation file that names what the ids are.

``image_id`` is the image's position in the run's file list, counted from 1 (folders expanded, sorted, as
``predict`` lists them), so the same command gives the same ids; a file that could not be read keeps its id
unused. Every file is written atomically: an interrupted run leaves no half-written JSON.
"""

import json
import os

from trtkit.app.mask_files import output_names
from trtkit.data.boxes.coco import coco_bboxes

BOXES_SUFFIX = ".boxes.png"
RESULTS_NAME = "detections.json"
IMAGES_NAME = "images.json"


class BoxWriter(object):
    """Writes each image's picture into ``out`` (a folder that exists) and, on ``close``, the run's JSON files.
    ``files``: the run's images in order (their ids); ``categories``: ``(class index, name)`` of each class the
    model detects (an SSD's background is none); ``contract``: the build's, whose EXIF handling the picture
    follows."""

    def __init__(self, out, files, categories, contract=None):
        self.out = out
        self.files = list(files)
        self.outputs = output_names(self.files)
        self.categories = [{"id": int(i), "name": str(n)} for i, n in categories]
        self.contract = contract
        self.position = 0  # where the next answered file is looked for (answers come in file order)
        self.results = []
        self.images = []

    def write(self, path, found):
        """Draw image file ``path``'s detections (an ``ImageDetections`` in its pixels) and keep its COCO
        records; returns the picture's path."""
        from trtkit.app.palette import draw_boxes, encode_png
        from trtkit.data.decode import upright
        from trtkit.data.preprocess import _pil
        from trtkit.fileio import write_bytes
        index = self._index(path)
        image_id = index + 1
        picture = os.path.join(self.out, self.outputs[index] + BOXES_SUFFIX)
        with _pil().open(path) as photo:
            photo.load()
            if self.contract is not None:
                photo = upright(photo, self.contract)
            texts = ["{} {:.2f}".format(name, score) for name, score in zip(found.names, found.scores)]
            write_bytes(picture, encode_png(draw_boxes(photo, found.boxes, found.labels, texts, found.landmarks)))
            width, height = photo.size
        self.images.append({"id": image_id, "file_name": path, "width": int(width), "height": int(height)})
        points = found.landmarks if found.landmarks is not None else [None] * len(found)
        for bbox, score, label, dots in zip(coco_bboxes(found.boxes, decimals=2), found.scores, found.labels, points):
            self.results.append({"image_id": image_id, "category_id": int(label), "bbox": bbox,
                                 "score": round(float(score), 5)})
            if dots is not None:  # COCO's keypoint results: x, y, visibility (2: labelled and visible) per point
                self.results[-1]["keypoints"] = [v for x, y in dots
                                                 for v in (round(float(x), 2), round(float(y), 2), 2)]
        return picture

    def _index(self, path):
        """The position of ``path`` in the file list, from the last one answered on (skipped files pass by)."""
        for index in range(self.position, len(self.files)):
            if self.files[index] == path:
                self.position = index + 1
                return index
        raise ValueError("{} is not among the run's files after position {}".format(path, self.position))

    def close(self):
        """Write ``detections.json`` and ``images.json``; returns the results file's path."""
        from trtkit.fileio import write_text
        results = os.path.join(self.out, RESULTS_NAME)
        write_text(results, "[\n" + ",\n".join(json.dumps(r) for r in self.results) + "\n]\n" if self.results
                   else "[]\n")
        write_text(os.path.join(self.out, IMAGES_NAME), json.dumps(
            {"images": self.images, "categories": self.categories},
            indent=1) + "\n")
        return results
