"""Device-record parsers on recorded Jetson outputs (tests/fixtures/jetson); GPUs from the one GPU probe."""

import os

import pytest

from trtkit.backends.tensorrt import gpu
from trtkit.bench import device
from trtkit.deps import available

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "jetson")


def fixture_run(folder):
    """Command outputs recorded in a fixture folder; a missing file is a command that is not there."""
    names = {"nvpmodel": "nvpmodel-q.txt", "jetson_clocks": "jetson_clocks-show.txt"}

    def run(args):
        path = os.path.join(FIXTURES, folder, names[args[0]])
        if not os.path.isfile(path):
            return None
        with open(path) as handle:
            return handle.read()
    return run


def record(folder):
    return device.jetson_record(os.path.join(FIXTURES, folder), run=fixture_run(folder))


@pytest.mark.parametrize("folder,module,l4t,mode,mode_id,clocks,cc", [
    ("nano-r32.7-maxn", "NVIDIA Jetson Nano Developer Kit", "32.7.1", "MAXN", 0, True, "5.3"),
    ("nano-r32.7-5w", "NVIDIA Jetson Nano Developer Kit", "32.7.1", "5W", 1, False, "5.3"),
    ("xavier-agx-r35.3-30w", "Jetson-AGX", "35.3.1", "MODE_30W_ALL", 3, False, "7.2"),
    ("orin-agx-r36.3-maxn", "NVIDIA Jetson AGX Orin Developer Kit", "36.3.0", "MAXN", 0, True, "8.7"),
    ("orin-nano-r36.3-15w-sysfs", "NVIDIA Jetson Orin Nano Developer Kit", "36.3.0", "15W", 0, False, "8.7"),
])
def test_jetson_record_from_fixtures(folder, module, l4t, mode, mode_id, clocks, cc):
    rec = record(folder)
    assert rec["module"] == module
    assert rec["l4t"]["l4t"] == l4t
    assert rec["power_mode"] == {"name": mode, "id": mode_id}
    assert rec["jetson_clocks"]["on"] is clocks
    assert rec["compute_capability"] == cc


def test_nano_details():
    maxn, low = record("nano-r32.7-maxn"), record("nano-r32.7-5w")
    assert maxn["l4t"]["board"] == "t210ref" and maxn["l4t"]["major"] == 32
    assert maxn["soc"] == "tegra210" and maxn["gpu_arch"] == "Maxwell"
    assert maxn["jetson_clocks"]["cpus_online"] == 4 and maxn["jetson_clocks"]["emc_override"]
    # 5W: two cores offline, governors scaling, EMC not overridden
    assert low["jetson_clocks"]["cpus_online"] == 2
    assert not low["jetson_clocks"]["cpu_locked"] and not low["jetson_clocks"]["gpu_locked"]
    assert low["jetson_clocks"]["power_mode"] == "5W"


def test_orin_release_and_sysfs_fallback():
    rec = record("orin-nano-r36.3-15w-sysfs")
    assert rec["l4t"]["kernel_variant"] == "oot" and rec["l4t"]["board"] == "generic"
    assert rec["jetson_clocks"]["source"].startswith("cpufreq sysfs")
    assert rec["jetson_clocks"]["cpus_online"] == 6


def test_xavier_model_string_needs_compatible():
    rec = record("xavier-agx-r35.3-30w")
    assert rec["family"] == "Jetson Xavier" and rec["soc"] == "tegra194"
    slug = device.device_slug({"jetson": rec})
    assert slug == "jetson-agx-mode-30w-all"
    assert device.device_slug({"jetson": record("nano-r32.7-5w")}) == "jetson-nano-5w"


def test_not_a_jetson(tmp_path):
    assert device.jetson_record(str(tmp_path), run=lambda args: None) is None


def test_parsers_reject_garbage():
    assert device.parse_tegra_release("hello") is None
    assert device.parse_nvpmodel("NVPM ERROR: cannot open config") is None
    assert device.parse_jetson_clocks("Permission denied") is None
    assert device.parse_device_tree_string(b"NVIDIA Jetson Nano Developer Kit\x00") == [
        "NVIDIA Jetson Nano Developer Kit"]


def test_desktop_gpu_slug_and_description():
    gpus = [{"name": "NVIDIA GeForce RTX 3090", "compute_capability": "8.6", "memory_bytes": 25769803776,
             "multiprocessors": 82, "driver": "550.54.14"}]
    assert device.device_slug({"gpus": gpus, "cpu": {}}) == "geforce-rtx-3090"
    text = device.describe({"gpus": gpus + [{"name": "Tesla T4", "driver": None}], "cpu": {}, "software": {}})
    assert "GPU NVIDIA GeForce RTX 3090 (sm 8.6, driver 550.54.14)" in text
    assert "GPU Tesla T4 (sm ?, driver ?)" in text


def test_driver_cuda_version_as_users_read_it():
    assert gpu.cuda_version_text(12040) == "12.4" and gpu.cuda_version_text(11080) == "11.8"
    assert gpu.cuda_version_text(13000) == "13.0" and gpu.cuda_version_text(0) is None


def test_gpu_record_comes_from_the_probe_the_runners_use():
    """One GPU probe: the device record lists exactly the GPUs that backends.tensorrt.gpu finds."""
    gpus, driver_cuda = device.gpu_record()
    assert [g["name"] for g in gpus] == [g["name"] for g in gpu.devices()]
    first = gpu.probe()
    if first is None:
        assert gpus == [] and driver_cuda is None
    else:
        assert gpus[0]["compute_capability"] == first["compute_capability"] and len(gpus) == first["count"]
        assert gpus[0]["memory_bytes"] > 0 and gpus[0]["multiprocessors"] > 0


def test_this_machine_record_is_complete():
    rec = device.device_record(import_torch=False)
    assert rec["cpu"]["usable_cores"] >= 1 and rec["cpu"]["model"]
    assert rec["software"]["numpy"] and rec["slug"]
    assert "CPU" in device.describe(rec)


@pytest.mark.skipif(not available("tensorrt_rtx"), reason="TensorRT-RTX is not installed here")
def test_the_record_says_how_tensorrt_rtx_was_installed_and_its_library_version():
    """Read for real from this machine's installed wheels (tensorrt_rtx_cu12 and its -bindings/-libs)."""
    import tensorrt_rtx
    rec = device.device_record(import_torch=False)
    rtx = rec["software"]["tensorrt_rtx_install"]
    assert rtx["package"] in ("tensorrt-rtx-cu12", "tensorrt-rtx-cu13") and rtx["cuda"] == rtx["package"][-2:]
    assert rtx["module"] == tensorrt_rtx.__version__ and rtx["libs"] and rtx["bindings"]
    assert rec["software"]["tensorrt_rtx"] == rtx["version"]
    assert "({}, library {})".format(rtx["package"], tensorrt_rtx.__version__) in device.describe(rec)


def test_the_cuda_flavour_of_tensorrt_rtx_comes_from_the_package_names():
    cu13 = {"tensorrt_rtx_cu13": "1.8.0.10", "tensorrt-rtx-cu13-bindings": "1.8.0.10",
            "tensorrt_rtx_cu13_libs": "1.8.0.9", "numpy": "2.1.0"}
    assert device.rtx_install(cu13, "1.8.0.10") == {
        "package": "tensorrt-rtx-cu13", "cuda": "13", "version": "1.8.0.10", "bindings": "1.8.0.10",
        "libs": "1.8.0.9", "module": "1.8.0.10", "others": []}
    both = dict(cu13, **{"tensorrt_rtx_cu12_libs": "1.7.1.116"})  # a leftover of another flavour is named
    assert device.rtx_install(both)["package"] == "tensorrt-rtx-cu13"
    assert device.rtx_install(both)["others"] == ["tensorrt-rtx-cu12"]
    assert device.rtx_install({"tensorrt_rtx_cu12_bindings": "1.7.1.116"})["version"] == "1.7.1.116"
    assert device.rtx_install({"tensorrt": "10.3.0", "tensorrt-cu12": "10.3.0"}) is None
