"""docs/tensorrt-api.md (the version table) against the code and the real tensorrt_rtx module.

The table lists, per version-dependent operation, which TensorRT attributes 8.2,
8.6, 10.x, 11.x and TensorRT-RTX have (`` `Owner.name` ``, or "no `` `Owner.name` ``")
and the ``api.py`` functions that bridge it. These tests read the table and
``trtkit`` with ``ast`` (nothing imitates TensorRT) and fail when:

* a public function of ``api.py`` that tests an attribute (``has``, or a helper that
  does) is in no row, or a row names a function ``api.py`` does not define;
* a cell contradicts ``api.API_TABLE`` (the data the code's own checks use);
* an attribute ``API_TABLE`` marks as version-dependent is in no row;
* the RTX column disagrees with ``hasattr`` on the installed ``tensorrt_rtx``;
* a module other than ``api.py`` touches an attribute the table lists, or one that
  is not in every version, or takes a computed attribute of a TensorRT object:
  every version-dependent call goes through ``api.py``.
"""

import ast
import glob
import os
import re

import pytest

from trtkit.backends.tensorrt import api
from trt_ast import PROBES, is_trt_value  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "docs", "tensorrt-api.md")
API_PY = os.path.join(ROOT, "trtkit", "backends", "tensorrt", "api.py")
COLUMNS = {"8.2": "8.2", "8.6": "8.5", "10.x": "10", "11.x": "11", "TensorRT-RTX": "rtx"}  # table column -> style
NAME = re.compile(r"(\bno\s+)?`(\w+)\.(\w+)`")
SOURCE = re.compile(r"\[([\w.-]+)\]")


def read_table(path=TABLE):
    """(rows as {column: cell}, source tags defined under the table)."""
    with open(path) as handle:
        text = handle.read()
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == len(header), line
        rows.append(dict(zip(header, cells)))
    sources = set(re.findall(r"^- \[([\w.-]+)\] ", text, re.M))
    return rows, sources


def cell_names(cell):
    """[(owner, attribute, present?)] named in a cell; owner "module" for ``trt.X``."""
    return [("module" if owner == "trt" else owner, attr, not no) for no, owner, attr in NAME.findall(cell)]


def row_functions(row):
    return re.findall(r"`(\w+)`", row["api.py"])


def _call_name(node):
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def api_functions(path=API_PY):
    """{public module-level function of api.py: True when it handles a version difference}.

    It does when its body probes an attribute (``has``/``hasattr``) or calls an api function
    that does, or touches an attribute ``API_TABLE`` marks as missing from some version."""
    with open(path) as handle:
        tree = ast.parse(handle.read())
    functions = dict((n.name, n) for n in tree.body if isinstance(n, ast.FunctionDef))
    direct = {}
    for name, node in functions.items():
        calls = set(_call_name(n) for n in ast.walk(node) if isinstance(n, ast.Call))
        attrs = set(n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute))
        partial = set(a for a in attrs if a in api.API_TABLE and set(api.API_TABLE[a][1]) != set(api.STYLES))
        direct[name] = (bool(calls & {"has", "hasattr"}) or bool(partial), calls)
    handles = dict((name, flag) for name, (flag, _) in direct.items())
    changed = True
    while changed:  # a function that calls one that handles a difference handles it too
        changed = False
        for name, (_, calls) in direct.items():
            if not handles[name] and any(handles.get(c) for c in calls if c not in ("has",)):
                handles[name] = changed = True
    return dict((name, flag) for name, flag in handles.items() if not name.startswith("_") and name != "has")


def test_every_api_function_that_bridges_versions_is_in_the_table_and_every_named_one_exists():
    rows, _ = read_table()
    named = set(f for row in rows for f in row_functions(row))
    functions = api_functions()
    bridging = set(name for name, flag in functions.items() if flag)
    # the scan really sees the bridges
    assert {"set_workspace", "engine_io", "execute", "network_flags", "set_timing_cache", "calibrator_base"} <= bridging
    assert sorted(bridging - named) == []
    assert sorted(named - set(functions)) == []


def test_table_cells_agree_with_the_code_api_table_and_cite_a_source():
    rows, sources = read_table()
    assert len(rows) >= 12
    wrong = []
    for row in rows:
        for column, style in COLUMNS.items():
            cell = row[column]
            tags = set(SOURCE.findall(cell))
            if not tags and "not checked" not in cell:
                wrong.append("{} / {}: no source".format(row["operation"], column))
            wrong += ["{} / {}: unknown source [{}]".format(row["operation"], column, t) for t in tags - sources]
            for owner, attr, present in cell_names(cell):
                entry = api.API_TABLE.get(attr)
                if entry is None or entry[0] != owner:
                    continue  # documented, not used by the code (or on another owner)
                if (style in entry[1]) != present:
                    wrong.append("{} / {}: {}.{} {} but API_TABLE says {}".format(
                        row["operation"], column, owner, attr, "present" if present else "absent",
                        sorted(entry[1])))
    assert wrong == []


def test_every_version_dependent_attribute_of_the_code_is_in_the_table():
    rows, _ = read_table()
    documented = set()
    for row in rows:
        for column in COLUMNS:
            for owner, attr, _ in cell_names(row[column]):
                documented |= {owner, attr}  # `TensorIOMode.INPUT` names the class TensorIOMode too
    partial = set(name for name, (_, styles) in api.API_TABLE.items()
                  if set(styles) != set(api.STYLES) and not name.startswith("__"))
    assert sorted(partial - documented) == []


def test_rtx_column_matches_the_installed_tensorrt_rtx():
    trt = pytest.importorskip("tensorrt_rtx")
    rows, _ = read_table()
    checked, wrong = 0, []
    for row in rows:
        for owner, attr, present in cell_names(row["TensorRT-RTX"]):
            holder = trt if owner == "module" else getattr(trt, owner, None)
            if holder is None:
                wrong.append("{}: tensorrt_rtx has no {}".format(row["operation"], owner))
                continue
            checked += 1
            if hasattr(holder, attr) != present:
                wrong.append("{}: {}.{} is {} in tensorrt_rtx {}, the table says {}".format(
                    row["operation"], owner, attr, "present" if hasattr(holder, attr) else "absent",
                    trt.__version__, "present" if present else "absent"))
    assert checked >= 40
    assert wrong == []



def calls_outside_api(source, guarded, where="<source>"):
    """Problems: ``guarded`` attributes touched (or probed) on TensorRT objects, and computed attributes of them."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in guarded and is_trt_value(node.value):
            problems.append("{}:{}: .{} outside api.py".format(where, node.lineno, node.attr))
        if isinstance(node, ast.Call) and _call_name(node) in PROBES and len(node.args) >= 2 \
                and is_trt_value(node.args[0]):
            arg = node.args[1]
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                problems.append("{}:{}: a computed attribute of a TensorRT object outside api.py".format(
                    where, node.lineno))
            elif arg.value in guarded:
                problems.append("{}:{}: probes {!r} outside api.py".format(where, node.lineno, arg.value))
    return problems


def guarded_attributes():
    """What only api.py may touch: every attribute the table names, and every one some version lacks."""
    rows, _ = read_table()
    names = set(attr for row in rows for column in COLUMNS for _, attr, _ in cell_names(row[column]))
    names |= set(n for n, (_, styles) in api.API_TABLE.items() if set(styles) != set(api.STYLES))
    return names - {"__version__"}


def test_version_dependent_calls_are_made_only_in_api_py():
    guarded = guarded_attributes()
    assert {"build_serialized_network", "create_timing_cache", "execute_async_v3", "ComputeCapability"} <= guarded
    problems = []
    for path in sorted(glob.glob(os.path.join(ROOT, "trtkit", "**", "*.py"), recursive=True)):
        if os.path.abspath(path) == API_PY:
            continue
        with open(path) as handle:
            problems += calls_outside_api(handle.read(), guarded, os.path.relpath(path, ROOT))
    assert problems == []


def test_outside_api_check_catches_direct_calls_and_computed_attributes():
    guarded = guarded_attributes()
    bad = ("def build(builder, network, config):\n"
           "    return builder.build_serialized_network(network, config)\n"
           "def base(trt, name):\n"
           "    return getattr(trt, name)\n"
           "def rtx(trt):\n"
           "    return has(trt, 'ComputeCapability')\n")
    problems = sorted(calls_outside_api(bad, guarded))
    assert len(problems) == 3, problems
    assert ":2: .build_serialized_network" in problems[0] and ":4: a computed" in problems[1]
    assert ":6: probes 'ComputeCapability'" in problems[2]
    assert calls_outside_api("def f(trt, config):\n    return api.set_workspace(trt, config, 1)\n", guarded) == []


def test_bridges_moved_into_api_py_on_the_real_tensorrt_rtx():
    trt = pytest.importorskip("tensorrt_rtx")
    from trtkit.errors import InputError
    config = trt.Builder(trt.Logger(trt.Logger.WARNING)).create_builder_config()
    # the timing cache is never touched on RTX: its calls are no-ops that need a GPU during AOT builds
    assert api.timing_cache_works(trt) is False and api.set_timing_cache(trt, config, b"") is False
    assert api.flavour_name(trt) == "TensorRT-RTX"
    for name in api.CALIBRATOR_BASES + ("Builder",):  # calibrators are gone; other classes are never a base
        with pytest.raises(InputError) as info:
            api.calibrator_base(trt, name)
        assert name in str(info.value) and "Q/DQ" in info.value.hint
