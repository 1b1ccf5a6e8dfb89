"""The build's typed records: round trips, unknown keys kept, old manifests read, newer ones refused, and the
build folder never part of a record (a moved build still loads and runs)."""

import json
import os
import shutil

import pytest

from trtkit.errors import InputError
from trtkit.pipeline.manifest import MANIFEST_NAME, load_manifest, open_build, save_manifest
from trtkit.pipeline.records import SCHEMA_VERSION, ArtifactRecord, Manifest, Selection, Verification

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
V1 = os.path.join(FIXTURES, "manifest_v1.json")  # written by trtkit before typed records (an FP32+INT8 build)


def test_each_record_round_trips_with_the_keys_it_does_not_know():
    verify = {"images": 10, "decision": "binary-logit", "top1_agreement": 0.9, "accuracy": None,
              "a_field_from_a_newer_trtkit": [1, 2]}
    artifact = {"name": "m.int8", "precision": "int8", "backend": "onnxruntime", "path": "m.int8.onnx",
                "verify": verify, "status": "ok", "isa": {"target": "avx2"}, "something_new": {"x": 1}}
    selection = {"chosen": "m.int8", "max_drop": 0.5, "metric": "agreement", "candidates": [{"name": "m.int8"}],
                 "notes": [], "later": True}
    manifest = {"schema_version": SCHEMA_VERSION, "model": {"name": "m"}, "artifacts": [artifact],
                "selection": selection, "extra_top": "kept"}
    for cls, data in ((Verification, verify), (ArtifactRecord, artifact), (Selection, selection),
                      (Manifest, manifest)):
        record = cls.from_json(data)
        assert record.to_json() == data, cls.__name__
        assert cls.from_json(json.loads(json.dumps(record.to_json()))) == record
    typed = Manifest.from_json(manifest)
    assert isinstance(typed.artifacts[0], ArtifactRecord) and isinstance(typed.artifacts[0].verify, Verification)
    assert isinstance(typed.selection, Selection) and typed.selection.chosen == "m.int8"
    assert typed.artifacts[0].verify.top1_agreement == 0.9 and typed.artifacts[0].label == "int8"
    assert typed["artifacts"][0]["verify"]["top1_agreement"] == 0.9  # the dict view scripts use
    assert typed.artifact("m.int8") is typed.artifacts[0] and typed.artifact("m.fp32") is None


def test_a_manifest_from_before_typed_records_loads_as_it_is(tmp_path):
    with open(V1) as handle:
        original = json.load(handle)
    assert "schema_version" not in original
    manifest = load_manifest(V1)
    assert manifest.to_json() == original
    int8 = manifest.artifact("resnet18.int8")
    assert int8.precision == "int8" and int8.status == "ok" and int8.verify.top1_agreement >= 0.98
    assert int8.calibration["method"] == "entropy" and manifest.output_kind == "logits"
    save_manifest(str(tmp_path), manifest)
    with open(os.path.join(str(tmp_path), MANIFEST_NAME)) as handle:
        assert json.load(handle) == original


def test_a_manifest_from_a_newer_trtkit_is_refused_in_one_line(tmp_path):
    with open(V1) as handle:
        data = json.load(handle)
    data["schema_version"] = SCHEMA_VERSION + 1
    data["trtkit_version"] = "99.0"
    path = tmp_path / MANIFEST_NAME
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as info:
        load_manifest(str(tmp_path))
    assert "written by a newer trtkit (99.0" in info.value.message and "upgrade" in info.value.hint
    path.write_text(json.dumps({"artifacts": "not a list"}))
    with pytest.raises(InputError, match="not a trtkit build manifest"):
        load_manifest(str(path))


def test_a_build_folder_is_never_in_its_record_and_a_moved_build_still_runs(sample_build, tmp_path):
    import trtkit
    from trtkit.data import load_images
    from trtkit.models.sample import sample_contract
    out, manifest = sample_build
    assert isinstance(manifest, Manifest) and manifest.schema_version == SCHEMA_VERSION
    assert "_dir" not in manifest.to_json() and "_dir" not in load_manifest(out).to_json()
    moved = str(tmp_path / "elsewhere")
    shutil.copytree(out, moved)
    build = open_build(moved)
    assert build.folder == os.path.abspath(moved)
    assert build.path(build.manifest.artifacts[0]).startswith(build.folder)
    images = load_images("sample", sample_contract(), limit=4).images
    with trtkit.load(moved, precision="fp32") as model:
        assert model.path.startswith(os.path.abspath(moved))
        assert model.logits(images).shape[0] == 4
