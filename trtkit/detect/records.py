"""``Detections``: one image's answer, as every part of trtkit hands it on."""

import numpy as np


class Detections(object):
    """One image's detections, best first: ``boxes`` float32 ``[D, 4]`` (x1 y1 x2 y2), ``scores`` float32
    ``[D]``, ``labels`` int64 ``[D]`` (the model's class indices); ``anchors`` int64 ``[D]``: the anchor row
    of the model's output each came from (None where not known, e.g. NMS in the graph), which
    ``with_landmarks`` gathers a face detector's ``landmarks`` ``[N, A, 2K]`` row by; ``landmarks`` float32
    ``[D, K, 2]`` (x, y) or None. Which pixels the boxes and points are in (the model input's or the original
    image's) is the caller's to say; ``mapped(fn)`` moves both."""

    def __init__(self, boxes, scores, labels, anchors=None, landmarks=None):
        self.boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        self.scores = np.asarray(scores, dtype=np.float32).reshape(-1)
        self.labels = np.asarray(labels, dtype=np.int64).reshape(-1)
        self.anchors = None if anchors is None else np.asarray(anchors, dtype=np.int64).reshape(-1)
        self.landmarks = None if landmarks is None else _points(landmarks, len(self.boxes))
        if not len(self.boxes) == len(self.scores) == len(self.labels) or \
                any(v is not None and len(v) != len(self.boxes) for v in (self.anchors, self.landmarks)):
            raise ValueError("Detections: {} boxes, {} scores, {} labels, anchors {}, landmarks {}".format(
                len(self.boxes), len(self.scores), len(self.labels), *[None if v is None else len(v) for v in (
                    self.anchors, self.landmarks)]))

    def _taken(self, keep):
        return (None if self.anchors is None else self.anchors[keep],
                None if self.landmarks is None else self.landmarks[keep])

    def __len__(self):
        return int(self.scores.shape[0])

    def above(self, score):
        """The detections scoring at least ``score``."""
        keep = self.scores >= score
        return Detections(self.boxes[keep], self.scores[keep], self.labels[keep], *self._taken(keep))

    def with_landmarks(self, landmarks):
        """The same detections with their points: ``landmarks`` ``[A, 2K]`` (one image's rows of the model's
        ``landmarks`` output, in the boxes' pixels) gathered by ``anchors``."""
        if self.anchors is None:
            raise ValueError("Detections.with_landmarks: the detections do not say which anchors they came from")
        return Detections(self.boxes, self.scores, self.labels, self.anchors, np.asarray(landmarks)[self.anchors])

    def mapped(self, move_boxes):
        """The same detections with ``move_boxes(boxes)``'s boxes (e.g. to the original image's pixels); the
        landmarks moved as boxes of no size (x, y, x, y)."""
        points = None
        if self.landmarks is not None and self.landmarks.size:
            flat = self.landmarks.reshape(-1, 2)
            points = np.asarray(move_boxes(np.concatenate([flat, flat], 1)))[:, :2].reshape(self.landmarks.shape)
        elif self.landmarks is not None:
            points = self.landmarks
        return Detections(move_boxes(self.boxes), self.scores, self.labels, self.anchors, points)

    def __repr__(self):
        return "Detections({} boxes)".format(len(self))

    @classmethod
    def empty(cls):
        return cls(np.zeros((0, 4), np.float32), np.zeros((0,), np.float32), np.zeros((0,), np.int64))


def _points(landmarks, count):
    """``landmarks`` as float32 ``[count, K, 2]``: given ``[D, 2K]`` rows (an output's) or ``[D, K, 2]``; K is
    read from the shape, so no detection still says how many points each would have."""
    points = np.asarray(landmarks, dtype=np.float32)
    if points.ndim == 3:
        return points.reshape(count, points.shape[1], 2)
    return points.reshape(count, (points.shape[-1] if points.ndim == 2 else points.size) // 2, 2)
