"""The pure helpers of ``benchmarks/detection_cpu.py``: the goal's verdict and reading graph-NMS outputs (no timing)."""

import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.detection_cpu import AUTO_KEY, NNCF_KEY, graph_detections, verdict  # noqa: E402


def test_verdict_needs_speed_at_every_batch_and_no_lower_map():
    figures = {(AUTO_KEY, 1): [2.0, 2.2, 1.9], (NNCF_KEY, 1): [2.0, 2.0, 2.0],
               (AUTO_KEY, 8): [3.0, 2.0, 3.3], (NNCF_KEY, 8): [3.0, 3.0, 3.0]}
    v = verdict(figures, {AUTO_KEY: {"map": 0.31}, NNCF_KEY: {"map": 0.30}}, [1, 8])
    assert v["map_not_lower"] and v["per_batch"]["1"] == {"speed_vs_nncf": 1.0, "met": True}
    assert v["per_batch"]["8"]["speed_vs_nncf"] == 1.0 and v["met"]
    lower = verdict(figures, {AUTO_KEY: {"map": 0.29}, NNCF_KEY: {"map": 0.30}}, [1, 8])
    assert not lower["map_not_lower"] and not lower["met"] and not lower["per_batch"]["1"]["met"]
    slow = dict(figures)
    slow[(AUTO_KEY, 8)] = [2.9, 2.0, 2.8]
    assert not verdict(slow, {AUTO_KEY: {"map": 0.31}, NNCF_KEY: {"map": 0.30}}, [1, 8])["met"]


def test_graph_detections_cut_the_padding_rows():
    boxes = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    scores = np.array([[0.9, 0.5, 0.0], [0.0, 0.0, 0.0]], np.float32)
    labels = np.array([[1, 2, -1], [-1, -1, -1]], np.int64)
    found = graph_detections({"det_boxes": boxes, "det_scores": scores, "det_labels": labels,
                              "det_count": np.array([2, 0], np.int64)})
    assert [len(f) for f in found] == [2, 0]
    assert found[0].labels.tolist() == [1, 2] and np.array_equal(found[0].boxes, boxes[0, :2])
