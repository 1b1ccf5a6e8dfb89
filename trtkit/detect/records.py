"""``Detections``: one image's answer, as every part of trtkit hands it on."""

import numpy as np


class Detections(object):
    """One image's detections, best first: ``boxes`` float32 ``[D, 4]`` (x1 y1 x2 y2), ``scores`` float32
    ``[D]``, ``labels`` int64 ``[D]`` (the model's class indices). Which pixels the boxes are in (the model
    input's or the original image's) is the caller's to say; ``mapped(fn)`` moves them."""

    def __init__(self, boxes, scores, labels):
        self.boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        self.scores = np.asarray(scores, dtype=np.float32).reshape(-1)
        self.labels = np.asarray(labels, dtype=np.int64).reshape(-1)
        if not len(self.boxes) == len(self.scores) == len(self.labels):
            raise ValueError("Detections: {} boxes, {} scores, {} labels".format(
                len(self.boxes), len(self.scores), len(self.labels)))

    def __len__(self):
        return int(self.scores.shape[0])

    def above(self, score):
        """The detections scoring at least ``score``."""
        keep = self.scores >= score
        return Detections(self.boxes[keep], self.scores[keep], self.labels[keep])

    def mapped(self, move_boxes):
        """The same detections with ``move_boxes(boxes)``'s boxes (e.g. to the original image's pixels)."""
        return Detections(move_boxes(self.boxes), self.scores, self.labels)

    def __repr__(self):
        return "Detections({} boxes)".format(len(self))

    @classmethod
    def empty(cls):
        return cls(np.zeros((0, 4), np.float32), np.zeros((0,), np.float32), np.zeros((0,), np.int64))
