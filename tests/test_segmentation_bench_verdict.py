"""The verdict of ``benchmarks/segmentation_cpu.py``: whom trtkit's choice is compared with, and when it wins.

Issue 21 point 8's rule on segmentation: NNCF's INT8 is the bar while it keeps the budget (pixel agreement
with FP32 >= 98%, mIoU within the points given); when it does not, the fastest of OpenVINO's own artifacts
that does. A choice over the budget never meets the goal, however fast.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.segmentation_cpu import keeps_budget, mean_iou, verdict  # noqa: E402

FIGURES = {"onnxruntime_fp32": [1.0, 1.0, 1.0], "openvino_fp32": [1.1, 1.0, 1.2],
           "openvino_nncf_int8": [4.0, 4.0, 4.0], "trtkit_auto": [3.0, 4.2, 2.9]}


def test_nncf_within_the_budget_is_the_bar():
    agreement = {"onnxruntime_fp32": 1.0, "openvino_fp32": 1.0, "openvino_nncf_int8": 0.99, "trtkit_auto": 0.995}
    miou = {"onnxruntime_fp32": 0.80, "openvino_fp32": 0.80, "openvino_nncf_int8": 0.795, "trtkit_auto": 0.80}
    v = verdict(agreement, miou, FIGURES, 1.0)
    assert v["baseline"] == "openvino_nncf_int8" and v["nncf_keeps_budget"] and v["chosen_keeps_budget"]
    assert v["speed_vs_baseline_per_round"] == [0.75, 1.05, 0.725] and v["speed_vs_baseline"] == 0.75
    assert not v["met"]


def test_nncf_over_the_budget_hands_the_bar_to_openvino_fp32():
    agreement = {"onnxruntime_fp32": 1.0, "openvino_fp32": 1.0, "openvino_nncf_int8": 0.90, "trtkit_auto": 0.99}
    miou = {"onnxruntime_fp32": 0.80, "openvino_fp32": 0.80, "openvino_nncf_int8": 0.70, "trtkit_auto": 0.798}
    v = verdict(agreement, miou, FIGURES, 1.0)
    assert v["baseline"] == "openvino_fp32" and not v["nncf_keeps_budget"] and v["met"]
    # the same speed over the budget (mIoU 1.5 points down) is no win
    v = verdict(agreement, dict(miou, trtkit_auto=0.785), FIGURES, 1.0)
    assert not v["chosen_keeps_budget"] and not v["met"]


def test_the_budget_is_agreement_and_miou_and_miou_is_against_the_masks():
    agreement = {"onnxruntime_fp32": 1.0, "a": 0.979, "b": 0.99}
    miou = {"onnxruntime_fp32": 0.5, "a": 0.5, "b": 0.489}
    assert not keeps_budget("a", agreement, miou, 1.0)  # agreement under 98%
    assert not keeps_budget("b", agreement, miou, 1.0) and keeps_budget("b", agreement, miou, 1.2)
    masks = [[[0, 1], [1, 255]]]
    assert mean_iou(masks, [[[0, 1], [1, 0]]], 2) == 1.0  # the ignored pixel counts nowhere
    assert abs(mean_iou(masks, [[[0, 0], [1, 0]]], 2) - 0.5 * (0.5 + 0.5)) < 1e-9
