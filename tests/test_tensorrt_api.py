"""The TensorRT API bridge against the API table (8.2, 8.5, 10, 11, RTX) and the real tensorrt_rtx module.

Nothing here imitates TensorRT. ``find_problems`` reads trtkit's TensorRT code
with ``ast``: every attribute taken from a TensorRT object must be in
``api.API_TABLE``, and must exist in every API style that can reach that line,
where ``if has(obj, "NAME")`` (and ``not``, ``and``, ``elif``, early ``raise``/
``return``) narrows the styles. The "rtx" column of the table is checked
against the installed tensorrt_rtx module itself.
"""

import ast
import glob
import os
import subprocess
import sys

import pytest

from trtkit.backends.tensorrt import api
from trt_ast import PROBES, is_trt_value  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "trtkit", "backends", "tensorrt")
# api helpers that are attribute tests under another name: name -> (attribute, positive?)
GUARD_HELPERS = {"strongly_typed_only": ("FP16", False), "supports_calibrator": ("IInt8EntropyCalibrator2", True),
                 "uses_tensor_names": ("execute_async_v3", True)}
ALL = frozenset(api.STYLES)


def _func_name(call):
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def _probe(call):
    """The attribute name tested by has/hasattr/getattr(obj, "NAME"...), or None."""
    if isinstance(call, ast.Call) and _func_name(call) in PROBES and len(call.args) >= 2:
        arg = call.args[1]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
    return None


def _guard(test):
    """(styles where ``test`` can be true, styles where it can be false)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        pos, neg = _guard(test.operand)
        return neg, pos
    if isinstance(test, ast.BoolOp):
        parts = [_guard(v) for v in test.values]
        if isinstance(test.op, ast.And):
            return frozenset.intersection(*[p for p, _ in parts]), ALL
        return ALL, frozenset.intersection(*[n for _, n in parts])
    if isinstance(test, ast.Call):
        name = _probe(test) if _func_name(test) in ("has", "hasattr") else None
        positive = True
        if name is None and _func_name(test) in GUARD_HELPERS:
            name, positive = GUARD_HELPERS[_func_name(test)]
        if name is not None:
            having = frozenset(api.styles_having(name))
            return (having, ALL - having) if positive else (ALL - having, having)
    return ALL, ALL


def _is_trt_attribute(node):
    return is_trt_value(node.value)



def _check_expr(node, reach, where, problems, used):
    for sub in ast.walk(node):
        probed = _probe(sub)
        if probed is not None and is_trt_value(sub.args[0]) and probed not in api.API_TABLE:
            problems.append("{}:{}: probes {!r}, which the API table does not list".format(where, sub.lineno, probed))
        if not isinstance(sub, ast.Attribute) or not _is_trt_attribute(sub):
            continue
        name = sub.attr
        if name.startswith("__") and name != "__version__":
            continue
        used.add(name)
        if name not in api.API_TABLE:
            problems.append("{}:{}: uses {!r}, which the API table does not list".format(where, sub.lineno, name))
            continue
        missing = set(reach) - api.styles_having(name)
        if missing:
            problems.append("{}:{}: {!r} is reached by API style(s) {} that lack it".format(
                where, sub.lineno, name, ", ".join(sorted(missing))))


def _terminates(body):
    return bool(body) and isinstance(body[-1], (ast.Raise, ast.Return, ast.Continue, ast.Break))


def _check_block(stmts, reach, where, problems, used):
    for stmt in stmts:
        if isinstance(stmt, ast.If):
            pos, neg = _guard(stmt.test)
            _check_expr(stmt.test, reach, where, problems, used)
            _check_block(stmt.body, reach & pos, where, problems, used)
            _check_block(stmt.orelse, reach & neg, where, problems, used)
            if _terminates(stmt.body) and not stmt.orelse:
                reach = reach & neg
        elif isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            for base in getattr(stmt, "bases", []):
                _check_expr(base, reach, where, problems, used)
            _check_block(stmt.body, reach, where, problems, used)
        else:
            blocks = [getattr(stmt, field) for field in ("body", "orelse", "finalbody") if
                      isinstance(getattr(stmt, field, None), list)]
            blocks += [h.body for h in getattr(stmt, "handlers", [])]
            if not blocks:
                _check_expr(stmt, reach, where, problems, used)
                continue
            for field, value in ast.iter_fields(stmt):
                if isinstance(value, ast.AST):
                    _check_expr(value, reach, where, problems, used)
                elif isinstance(value, list):
                    for item in value:
                        if isinstance(item, ast.withitem):
                            _check_expr(item.context_expr, reach, where, problems, used)
            for block in blocks:
                _check_block(block, reach, where, problems, used)


def find_problems(source, where="<source>", used=None):
    problems = []
    _check_block(ast.parse(source).body, ALL, where, problems, used if used is not None else set())
    return problems


def test_trtkit_touches_only_attributes_every_reaching_api_style_has():
    used = set()
    problems = []
    files = sorted(glob.glob(os.path.join(PACKAGE, "*.py")))
    assert len(files) >= 6
    for path in files:
        with open(path) as handle:
            problems += find_problems(handle.read(), os.path.relpath(path, ROOT), used)
    assert problems == []
    # the scan really sees the version-specific calls
    assert {"execute_async_v2", "execute_async_v3", "max_workspace_size", "set_memory_pool_limit",
            "EXPLICIT_BATCH", "STRONGLY_TYPED", "FP16", "INT8", "get_binding_shape",
            "set_compute_capability", "int8_calibrator", "platform_has_fast_int8"} <= used


def test_checker_catches_unguarded_and_unknown_attributes():
    bad = ("def run(context, addresses, stream):\n"
           "    context.execute_async_v2(addresses, stream)\n"
           "def workspace(config):\n"
           "    config.max_batch_size = 8\n"
           "def fp16(trt, config):\n"
           "    if has(config, 'set_memory_pool_limit'):\n"
           "        config.set_flag(trt.BuilderFlag.FP16)\n")
    problems = find_problems(bad)
    assert any("'execute_async_v2'" in p and "10, 11, rtx" in p for p in problems)
    assert any("'max_batch_size'" in p and "does not list" in p for p in problems)
    assert any("'FP16'" in p and "11, rtx" in p for p in problems)
    good = ("def run(context, addresses, stream):\n"
            "    if not has(context, 'execute_async_v2'):\n"
            "        raise RuntimeError('no bindings API')\n"
            "    context.execute_async_v2(addresses, stream)\n"
            "def fp16(trt, config):\n"
            "    if not strongly_typed_only(trt) and has(config, 'set_memory_pool_limit'):\n"
            "        config.set_flag(trt.BuilderFlag.FP16)\n"
            "    elif has(config, 'max_workspace_size'):\n"
            "        config.max_workspace_size = 1\n")
    assert find_problems(good) == []


def test_rtx_column_of_the_table_matches_the_real_tensorrt_rtx():
    trt = pytest.importorskip("tensorrt_rtx")
    wrong = []
    for name, (owner, styles) in sorted(api.API_TABLE.items()):
        holder = trt if owner == "module" else getattr(trt, owner)
        if hasattr(holder, name) != ("rtx" in styles):
            wrong.append("{}.{}: table says {}".format(owner, name, "present" if "rtx" in styles else "absent"))
    assert wrong == []


def test_bridge_on_the_real_tensorrt_rtx_module():
    trt = pytest.importorskip("tensorrt_rtx")
    assert api.version_tuple(trt)[0] >= 1 and all(isinstance(p, int) for p in api.version_tuple(trt))
    assert api.strongly_typed_only(trt) and not api.supports_calibrator(trt)
    assert api.network_flags(trt) == 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    builder = trt.Builder(trt.Logger(trt.Logger.WARNING))
    config = builder.create_builder_config()
    assert api.fast_precision(builder) == {"fp16": None, "int8": None}
    assert api.set_precision_flags(trt, config, "int8") == []
    api.set_workspace(trt, config, 1 << 28)
    assert config.get_memory_pool_limit(trt.MemoryPoolType.WORKSPACE) == 1 << 28
    api.set_compute_capabilities(trt, config, ["7.5", "8.6"])
    assert config.num_compute_capabilities == 2 and config.get_compute_capability(1) == trt.ComputeCapability.SM86
    with pytest.raises(Exception) as info:
        api.set_compute_capabilities(trt, config, ["6.1"])
    assert "6.1" in str(info.value)
    with pytest.raises(Exception) as info:
        api.set_calibrator(config, object())
    assert "Q/DQ" in str(info.value)


def test_importing_the_backend_does_not_import_tensorrt():
    code = ("import sys; from trtkit.backends import get_backend; b = get_backend('tensorrt-rtx'); "
            "print(sorted(m for m in ('tensorrt', 'tensorrt_rtx', 'torch', 'onnx') if m in sys.modules))")
    out = subprocess.check_output([sys.executable, "-c", code], cwd=ROOT, universal_newlines=True)
    assert out.strip() == "[]"


def test_dtype_names_cover_every_tensorrt_rtx_type_without_nptype():
    trt = pytest.importorskip("tensorrt_rtx")
    names = dict((member, api.dtype_name(trt, getattr(trt.DataType, member))) for member in trt.DataType.__members__)
    assert names["FLOAT"] == "float32" and names["HALF"] == "float16" and names["INT8"] == "int8"
    assert names["BF16"] == "bfloat16" and names["BOOL"] == "bool"
    with pytest.raises(Exception):  # what trtkit no longer calls: nptype has no BF16
        trt.nptype(trt.DataType.BF16)


def test_workspace_default_only_where_tensorrt_defaults_to_none():
    # 8.2: max_workspace_size alone, default 0; 8.5 keeps it beside set_memory_pool_limit; 10+: the pool alone
    assert api.workspace_default_for(memory_pool_limit=False, max_workspace_size=True) == 256 << 20
    assert api.workspace_default_for(memory_pool_limit=True, max_workspace_size=True) is None
    assert api.workspace_default_for(memory_pool_limit=True, max_workspace_size=False) is None
    trt = pytest.importorskip("tensorrt_rtx")
    config = trt.Builder(trt.Logger(trt.Logger.WARNING)).create_builder_config()
    assert api.default_workspace(config) is None  # set_memory_pool_limit: TensorRT's default is the device memory


def test_tensorrt_rtx_is_chosen_only_for_gpus_it_has_a_target_for():
    trt = pytest.importorskip("tensorrt_rtx")
    from trtkit.backends.tensorrt.builder import rtx_default_targets
    assert {"7.5", "8.6", "8.9", "12.0"} <= set(api.rtx_targets(trt))
    for cc, runs in (("8.6", True), ("7.5", True), ("8.9", True), ("9.0", False), ("7.0", False), ("5.3", False)):
        assert api.rtx_supports(trt, cc) is runs, cc
        gpu = {"name": "GPU {}".format(cc), "compute_capability": cc}
        assert rtx_default_targets(trt, gpu) == (["current"] if runs else None)
    assert rtx_default_targets(trt, None) is None  # no GPU: TensorRT-RTX's own default set


def test_tensorrt_rtx_loads_from_its_bindings_module_alone(tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings")
    # a site where 'tensorrt_rtx' (the front package) is missing: a shadowing package that fails to import
    shadow = tmp_path / "tensorrt_rtx"
    shadow.mkdir()
    (shadow / "__init__.py").write_text(u"raise ImportError('front package not installed')\n")
    code = ("import sys; sys.path.insert(0, {!r}); from trtkit.backends.tensorrt import api; "
            "m = api.load('tensorrt-rtx'); print(m.__name__, hasattr(m, 'Builder'))").format(str(tmp_path))
    out = subprocess.check_output([sys.executable, "-c", code], cwd=ROOT, universal_newlines=True)
    assert out.split() == ["tensorrt_rtx_bindings", "True"]
