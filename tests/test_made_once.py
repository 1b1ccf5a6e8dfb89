"""``fileio.made_once``: a cached file wanted by two processes at once is made by one of them only."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MAKER = """
import os, sys, time
from trtkit.fileio import made_once
path = sys.argv[1]
with made_once(path):
    if os.path.isfile(path):
        print("found")
    else:
        print("making", flush=True)
        time.sleep(float(sys.argv[2]))
        with open(path, "w") as handle:
            handle.write("made")
        print("made")
"""


def test_a_second_process_waits_for_the_first_and_finds_what_it_made(tmp_path):
    path = str(tmp_path / "sample.pt")
    env = dict(os.environ, PYTHONPATH=ROOT)
    first = subprocess.Popen([sys.executable, "-c", MAKER, path, "6"], stdout=subprocess.PIPE, env=env,
                             universal_newlines=True)
    assert first.stdout.readline().strip() == "making"  # it holds the lock from here until it has written
    second = subprocess.run([sys.executable, "-c", MAKER, path, "0"], stdout=subprocess.PIPE, env=env,
                            universal_newlines=True, timeout=120)
    assert first.wait(timeout=120) == 0 and second.returncode == 0
    assert second.stdout.split() == ["found"]  # it did not make it again beside the first
    assert open(path).read() == "made"


def test_a_cold_whole_run_puts_the_files_that_want_the_detector_last():
    """The detection sample trains beside the tests (conftest): the files that want it move after the others,
    whole and in their order, so the trainer has the run's first part to finish in."""
    import collections
    from conftest import DETECTOR_FILES, detector_files_last
    Item = collections.namedtuple("Item", "fspath name")
    Path = collections.namedtuple("Path", "basename")
    names = ["test_app_load.py", DETECTOR_FILES[0], DETECTOR_FILES[0], "test_export.py", DETECTOR_FILES[1],
             "test_zoo.py"]
    items = [Item(Path(name), "{}-{}".format(name, i)) for i, name in enumerate(names)]
    ordered = [item.name for item in detector_files_last(items)]
    assert ordered == ["test_app_load.py-0", "test_export.py-3", "test_zoo.py-5", DETECTOR_FILES[0] + "-1",
                       DETECTOR_FILES[0] + "-2", DETECTOR_FILES[1] + "-4"]
    here = os.path.dirname(os.path.abspath(__file__))
    assert all(os.path.isfile(os.path.join(here, name)) for name in DETECTOR_FILES), "a listed file was renamed"
