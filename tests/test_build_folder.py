"""The build folder holds exactly one consistent build, after kills and concurrent builds too."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import CACHE, ROOT
from trtkit.pipeline.folder import JOURNAL_NAME, STAGING_PREFIX, recover
from trtkit.pipeline.manifest import MANIFEST_NAME, manifest_files


def _popen_build(onnx, out, precision="fp32,fp16"):
    args = [sys.executable, "-m", "trtkit", "build", "--onnx", onnx, "--model", "resnet18", "--backend",
            "onnxruntime", "--precision", precision, "--calib-images", "64", "--verify-images", "64",
            "--bench-seconds", "0", "--out", out]
    env = dict(os.environ, TRTKIT_CACHE=CACHE, PYTHONPATH=ROOT)
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True)


def _wait_for(condition, proc, timeout=240):
    """Poll ``condition()`` until true; False when the process ended first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.01)
    raise AssertionError("timed out waiting for the build")


def _staged(out, suffix=None):
    """True once a staging folder exists (holding a file ending with ``suffix``, when given)."""
    for name in os.listdir(out) if os.path.isdir(out) else []:
        if name.startswith(STAGING_PREFIX):
            if suffix is None:
                return True
            staged = os.path.join(out, name)
            if any(f.endswith(suffix) for f in (os.listdir(staged) if os.path.isdir(staged) else [])):
                return True
    return False


def assert_consistent(out):
    """The folder holds the manifest and exactly the files it lists, and those include every file it names."""
    manifest = json.load(open(os.path.join(out, MANIFEST_NAME)))
    listed = set(manifest["files"])
    assert set(os.listdir(out)) == listed | {MANIFEST_NAME}
    for artifact in manifest["artifacts"]:
        named = {artifact["path"], artifact["onnx"]}
        named |= {v for k, v in (artifact.get("calibration") or {}).items() if k in ("report", "trt_calibration_cache")}
        assert named <= listed, named - listed
    assert sorted(listed) == sorted(manifest_files(manifest))
    return manifest


@pytest.fixture(scope="module")
def fp32_onnx(sample_build):
    out, manifest = sample_build
    return os.path.join(out, [a for a in manifest["artifacts"] if a["precision"] == "fp32"][0]["path"])


def test_killed_builds_leave_nothing_a_later_build_keeps(fp32_onnx, tmp_path):
    out = str(tmp_path / "engines")
    first = _popen_build(fp32_onnx, out, "fp32,int8")
    assert first.wait(timeout=600) == 0, first.stderr.read()
    before = assert_consistent(out)
    assert any(name.endswith(".calib.cache") for name in before["files"])

    moments = [lambda: _staged(out), lambda: _staged(out, ".fp32.onnx"), lambda: _staged(out, ".fp16.onnx")]
    killed = 0
    for moment in moments:
        proc = _popen_build(fp32_onnx, out, "fp32,fp16")
        if _wait_for(moment, proc):
            proc.send_signal(signal.SIGKILL)
            killed += 1
        proc.wait(timeout=60)
        # whatever the kill left, the old build is still complete and its manifest tells the truth
        manifest = json.load(open(os.path.join(out, MANIFEST_NAME)))
        assert manifest == before
        for artifact in manifest["artifacts"]:
            assert os.path.getsize(os.path.join(out, artifact["path"])) == artifact["bytes"]
        assert all(os.path.isfile(os.path.join(out, name)) for name in manifest["files"])
    assert killed >= 2, "the builds finished before they could be killed"
    assert any(name.startswith(STAGING_PREFIX) for name in os.listdir(out)), "a kill left no staging folder"

    last = _popen_build(fp32_onnx, out, "fp32,fp16")
    assert last.wait(timeout=600) == 0, last.stderr.read()
    manifest = assert_consistent(out)
    assert [a["precision"] for a in manifest["artifacts"]] == ["fp32", "fp16"]
    assert not any("int8" in name for name in os.listdir(out)), "files of the earlier build were kept"


def test_a_build_interrupted_while_publishing_is_cleaned_up(sample_build, tmp_path, monkeypatch):
    """Interrupted between moving files in and the manifest: no manifest lies, the next build cleans up."""
    from trtkit.pipeline import folder as buildfolder
    from trtkit.pipeline import BuildOptions, ModelOptions, build
    src, _ = sample_build
    options = dict(source=ModelOptions(onnx=os.path.join(src, "resnet18.fp32.onnx"), model="resnet18"),
                   backend="onnxruntime",
                   throughput_seconds=0, verify_images=32)
    out = str(tmp_path / "engines")
    build(BuildOptions(out=out, precisions="fp32", **options))
    calls = []
    real_replace = os.replace

    class Killed(BaseException):
        pass

    def replace_then_die(src_path, dst_path):
        if os.path.dirname(os.path.abspath(dst_path)) == out and not os.path.basename(src_path).startswith("."):
            calls.append(dst_path)
            if len(calls) == 2:
                raise Killed("killed while publishing")
        return real_replace(src_path, dst_path)

    monkeypatch.setattr(buildfolder.os, "replace", replace_then_die)
    with pytest.raises(Killed):
        build(BuildOptions(out=out, precisions="fp32,fp16", **options))
    monkeypatch.setattr(buildfolder.os, "replace", real_replace)
    assert not os.path.exists(os.path.join(out, MANIFEST_NAME))  # the old manifest no longer claims the files
    assert os.path.isfile(os.path.join(out, JOURNAL_NAME))
    manifest = build(BuildOptions(out=out, precisions="fp16", **options))
    assert manifest["files"] == ["resnet18.fp16.onnx", "resnet18.fp32.onnx"]
    assert_consistent(out)


def test_recover_removes_leftovers_but_not_the_users_files(tmp_path):
    out = tmp_path / "engines"
    staging = out / (STAGING_PREFIX + "abc")
    staging.mkdir(parents=True)
    (staging / "resnet18.fp32.onnx").write_bytes(b"partial")
    (out / ".resnet18.fp16.onnx.k2j3.tmp").write_bytes(b"partial")
    (out / "notes.txt").write_text(u"mine")
    (out / "resnet18.int8.onnx").write_bytes(b"from a killed publish")
    (out / JOURNAL_NAME).write_text(json.dumps({"files": ["resnet18.int8.onnx", "manifest.json"]}))
    removed = recover(str(out))
    assert sorted(removed) == sorted([STAGING_PREFIX + "abc", ".resnet18.fp16.onnx.k2j3.tmp", "resnet18.int8.onnx"])
    assert os.listdir(str(out)) == ["notes.txt"]


def test_two_builds_into_one_folder_at_once(fp32_onnx, tmp_path):
    out = str(tmp_path / "engines")
    procs = [_popen_build(fp32_onnx, out), _popen_build(fp32_onnx, out)]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    assert any(code == 0 for code, _ in results), results
    for code, err in results:
        if code != 0:
            lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
            assert code == 2 and len(lines) == 1 and "another trtkit build is writing into" in lines[0], err
            assert "Traceback" not in err
    assert_consistent(out)
