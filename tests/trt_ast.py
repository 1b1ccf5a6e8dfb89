"""What the TensorRT API tests read in trtkit's source: which expressions are TensorRT objects.

Shared by ``test_tensorrt_api.py`` (every probed attribute is in ``api.API_TABLE``) and
``test_tensorrt_api_table.py`` (the docs table covers the code, and version-dependent calls stay in api.py).
"""

import ast

# names that hold TensorRT objects in trtkit's code (the module, its builder, config, engine ...)
TRT_NAMES = {"trt", "builder", "config", "network", "parser", "profile", "engine", "context", "runtime",
             "cache", "logger", "kinds", "flags", "tensor"}
# calls that test for an attribute
PROBES = {"has", "hasattr", "getattr"}


def is_trt_value(value):
    """True when ``value`` is a TensorRT object by the naming rule (trt, builder, self.engine, trt.X ...)."""
    while True:
        if isinstance(value, ast.Name):
            return value.id in TRT_NAMES
        if isinstance(value, ast.Attribute):
            if value.attr in TRT_NAMES:
                return True
            value = value.value
        elif isinstance(value, ast.Call):
            value = value.func
        elif isinstance(value, ast.Subscript):
            value = value.value
        else:
            return False
