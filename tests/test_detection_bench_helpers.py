"""The pure helpers of ``benchmarks/detection_cpu.py``: the goal's verdict and reading graph-NMS outputs (no timing)."""

import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.detection_cpu import (AUTO_KEY, NNCF_KEY, auto_candidates, candidate_lines, graph_detections,  # noqa: E402
                                      text_table, verdict)


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


def _manifest():
    """A --precision auto manifest shaped as a detection build writes it (two candidates, one chosen)."""
    fp32 = {"name": "m.fp32", "backend": "onnxruntime", "precision": "fp32", "status": "ok",
            "throughput_ips": 243.87, "verify": {"map": 0.3267, "map50": 0.6893, "f1_agreement": 1.0}}
    int8 = {"name": "m.int8-minmax-openvino", "backend": "openvino", "precision": "int8", "status": "failing",
            "throughput_ips": 204.2, "verify": {"map": 0.3274, "map50": 0.6932, "f1_agreement": 0.55}}
    rows = [{"name": "m.fp32", "within_budget": True, "passes_gate": True, "images": 400},
            {"name": "m.int8-minmax-openvino", "within_budget": True, "passes_gate": False, "images": 400}]
    return {"artifacts": [fp32, int8], "selection": {"chosen": "m.fp32", "candidates": rows,
                                                     "notes": ["m.int8-minmax-openvino fails its gate"]}}


def test_auto_candidates_say_what_each_scored_and_which_was_chosen():
    rows = auto_candidates(_manifest())
    assert [r["chosen"] for r in rows] == [True, False]
    assert rows[1]["map"] == 0.3274 and rows[1]["img_per_s"] == 204.2 and rows[1]["passes_gate"] is False
    lines = candidate_lines(rows)
    assert len(lines) == 4 and "m.fp32 (chosen)" in lines[2] and "| 0.327 | 0.689 | 1.000 | 243.9 |" in lines[2]
    assert lines[3].endswith("| yes, failing |")
    assert auto_candidates({"artifacts": []}) == []


def test_text_table_lists_the_candidates_and_reads_an_older_record_without_them():
    row = {"runtime": "ONNX Runtime FP32", "batch": 1, "img_per_s": 10.0, "img_per_s_min_max": [9.0, 11.0],
           "latency_ms": 100.0, "select_ms": 1.0, "vs_nncf_int8": 1.1, "map": 0.3, "map50": 0.6, "f1_agreement": 1.0}
    v = {"map_auto": 0.3, "map_nncf": 0.31, "map_not_lower": False, "met": False,
         "per_batch": {"1": {"speed_vs_nncf": 1.1, "met": False}}}
    m = {"model": "m", "load_average_before": [1], "load_average_after": [1], "others_cpu_share_per_round": [0.5],
         "heldout_images": 400, "rows": [row], "verdict": v, "chosen": "m.fp32", "chosen_backend": "onnxruntime",
         "chosen_verification": {"map": 0.3, "reference_map": 0.3, "f1_agreement": 1.0}, "build_seconds": 1.0,
         "nncf_seconds": 1.0, "calib_images": 300, "nncf_ignored_scope": []}
    record = {"models": [m], "threads": 2, "batches": "1", "rounds": 4, "seconds": 1, "command": "c", "when": "w",
              "cpu": "cpu", "versions": {}, "uptime": "u"}
    older = text_table(record)
    assert "auto candidate" not in older and "NOT met" in older
    m.update(auto_candidates=auto_candidates(_manifest()), auto_notes=["m.int8-minmax-openvino fails its gate"])
    text = text_table(record)
    assert "verified (400 held-out images)" in text and "m.fp32 (chosen)" in text
    assert text.rstrip().endswith("auto: m.int8-minmax-openvino fails its gate")


def test_a_lower_map_within_its_interval_is_still_not_met_and_the_table_says_how_sure():
    figures = {(AUTO_KEY, 1): [2.2, 2.2, 2.2], (NNCF_KEY, 1): [2.0, 2.0, 2.0]}
    difference = {"metric": "map", "images": 400, "confidence": 0.95, "difference": -0.002,
                  "interval": [-0.006, 0.002], "replicates": 200}
    v = verdict(figures, {AUTO_KEY: {"map": 0.344}, NNCF_KEY: {"map": 0.346}}, [1], difference)
    assert not v["met"] and v["map_difference"] is difference
    row = {"runtime": "r", "batch": 1, "img_per_s": 10.0, "img_per_s_min_max": [9.0, 11.0], "latency_ms": 1.0,
           "select_ms": 1.0, "vs_nncf_int8": 1.1, "map": 0.344, "map50": 0.6, "f1_agreement": 1.0}
    m = {"model": "m", "load_average_before": [1], "load_average_after": [1], "others_cpu_share_per_round": [0.5],
         "heldout_images": 400, "rows": [row], "verdict": v, "chosen": "m.fp32", "chosen_backend": "onnxruntime",
         "chosen_verification": {"map": 0.3, "reference_map": 0.3, "f1_agreement": 1.0}, "build_seconds": 1.0,
         "nncf_seconds": 1.0, "calib_images": 300, "nncf_ignored_scope": []}
    text = text_table({"models": [m], "threads": 2, "batches": "1", "rounds": 4, "seconds": 1, "command": "c",
                       "when": "w", "cpu": "cpu", "versions": {}, "uptime": "u"})
    assert "NOT met" in text
    assert ("how sure: mAP@[.5:.95] trtkit auto - NNCF INT8 = -0.0020 (95% interval -0.0060..+0.0020, 200 paired "
            "bootstrap replicates over 400 images): not distinguishable on these images") in text
