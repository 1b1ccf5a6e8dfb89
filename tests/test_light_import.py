"""``import trtkit`` and every ``--help`` work where only numpy is installed.

Heavy packages are blocked with an import hook in a fresh interpreter: if any
trtkit module imported one at module level, the import (and the test) fails.
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCKED = ["torch", "onnx", "onnxruntime", "onnxscript", "tensorrt", "tensorrt_rtx", "PIL", "sklearn",
           "matplotlib", "tritonclient", "google.protobuf", "pycuda", "torch2trt", "cuda", "openvino", "nncf",
           "pycocotools", "faster_coco_eval"]

PRELUDE = """
import sys
BLOCKED = %r
class Blocker(object):
    def find_module(self, name, path=None):
        return self if any(name == b or name.startswith(b + '.') for b in BLOCKED) else None
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + '.') for b in BLOCKED):
            raise ImportError('blocked for this test: ' + name)
        return None
sys.meta_path.insert(0, Blocker())
""" % (BLOCKED,)


def run_python(code):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", PRELUDE + code], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120)


def test_import_and_help_with_numpy_only():
    code = """
import trtkit, trtkit.cli
from trtkit.cli import COMMANDS, main
import importlib
for name in COMMANDS:
    importlib.import_module(name)
names = []
for name in COMMANDS:
    mod = importlib.import_module(name)
    names.append(mod.NAME)
    try:
        main([mod.NAME, '--help'])
    except SystemExit as exc:
        assert exc.code == 0, (mod.NAME, exc.code)
try:
    main(['--help'])
except SystemExit as exc:
    assert exc.code == 0
loaded = [m for m in sys.modules if m.split('.')[0] in ('torch', 'onnx', 'onnxruntime', 'tensorrt_rtx')]
assert not loaded, loaded
print('COMMANDS', ' '.join(names))
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert "COMMANDS build" in result.stdout
    assert "usage: trtkit" in result.stdout


def test_missing_dependency_is_named_with_its_extra():
    result = run_python("""
from trtkit.cli import main
sys.exit(main(['build', '--out', '/tmp/trtkit-light-import-out']))
""")
    assert result.returncode == 3, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "pip install" in last
    assert "Traceback" not in result.stderr
