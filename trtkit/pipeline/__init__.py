"""The build: model -> validated FP32 ONNX -> precision variants -> engines -> verified manifest.

``options`` (BuildOptions), ``source`` (which model), ``folder`` (the build
folder), ``manifest`` (the record), ``verify`` (comparison with FP32) and
``run`` (the orchestration). ``from trtkit.pipeline import BuildOptions, ModelOptions, build``
is the import for callers that want the options object rather than
``trtkit.build(**keywords)``.
"""

from trtkit.pipeline.options import BuildOptions  # noqa: F401
from trtkit.pipeline.source import ModelOptions  # noqa: F401
from trtkit.pipeline.run import build  # noqa: F401
from trtkit.pipeline.table import format_table  # noqa: F401
