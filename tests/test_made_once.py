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


def test_a_cold_whole_run_puts_sample_free_files_first_and_the_files_that_want_the_detector_last():
    """The samples train beside the tests (conftest): the files that need no sample run first, whole and in
    their order, so the trainer has them to finish the classifier in, and the files that want the detector
    move after all others."""
    import collections
    from conftest import DETECTOR_FILES, SAMPLE_FREE_FILES, samples_last
    Item = collections.namedtuple("Item", "fspath name")
    Path = collections.namedtuple("Path", "basename")
    free = SAMPLE_FREE_FILES
    names = ["test_app_load.py", DETECTOR_FILES[0], free[1], DETECTOR_FILES[0], "test_export.py", free[0],
             DETECTOR_FILES[1], free[1], "test_zoo.py"]
    items = [Item(Path(name), "{}-{}".format(name, i)) for i, name in enumerate(names)]
    ordered = [item.name for item in samples_last(items)]
    assert ordered == [free[1] + "-2", free[0] + "-5", free[1] + "-7", "test_app_load.py-0", "test_export.py-4",
                       "test_zoo.py-8", DETECTOR_FILES[0] + "-1", DETECTOR_FILES[0] + "-3", DETECTOR_FILES[1] + "-6"]
    here = os.path.dirname(os.path.abspath(__file__))
    listed = DETECTOR_FILES + SAMPLE_FREE_FILES
    assert all(os.path.isfile(os.path.join(here, name)) for name in listed), "a listed file was renamed"
    assert not set(DETECTOR_FILES) & set(SAMPLE_FREE_FILES)
