"""The one recipe for a PyTorch baseline: the best plain PyTorch a user would write, in every timing.

Every TensorRT speed-up is quoted against PyTorch, so PyTorch must be timed the
way a user who cares runs it, or the speed-up is inflated:

- ``torch.backends.cudnn.benchmark = True`` (``baseline_settings``): cuDNN times
  its convolution algorithms for each input shape once and keeps the fastest;
  benchmarks feed fixed shapes, exactly the case it is for. A real flag of
  ``torch.backends.cudnn`` (docs.pytorch.org/docs/stable/backends.html,
  "torch.backends.cudnn.benchmark"), settable without a GPU.
- ``channels_last`` memory format for the model and the input on CUDA
  (``memory_format``): NVIDIA's tensor cores convolve NHWC natively, so NCHW
  tensors pay transposes (docs.pytorch.org/tutorials/intermediate/memory_format_tutorial.html:
  ``model.to(memory_format=torch.channels_last)``, ``x.contiguous(memory_format=torch.channels_last)``,
  checked with ``x.is_contiguous(memory_format=torch.channels_last)``). On a CPU
  trtkit's own matrix measured channels_last slower at batch 8 and 32
  (benchmarks/results/cpu-intel-xeon-2c/bench.md), so there FP32 stays
  contiguous and ``channels_last`` remains a mode of its own.
- AMP (``torch.autocast``, FP16 on CUDA) as a row of its own beside FP32 and
  ``.half()``: ``BASELINE_MODES`` is the list every GPU baseline times
  (``bench.plan.default_torch_modes``, gpu_check's torch-baselines and
  segmentation steps).

``backends.torch.TorchRunner`` prepares its model and every staged batch with
``prepare_model`` / ``prepare_input``; nothing else times PyTorch.
"""

# the PyTorch rows of every GPU baseline: FP32 (channels_last, cudnn benchmark), AMP FP16, .half()
BASELINE_MODES = ("fp32", "autocast", "half")


def baseline_settings(torch):
    """Set the global flags a tuned PyTorch program sets (cudnn.benchmark on); returns {flag: value set}."""
    torch.backends.cudnn.benchmark = True
    return {"cudnn.benchmark": bool(torch.backends.cudnn.benchmark)}


def memory_format(torch, mode, device):
    """The memory format a baseline in ``mode`` runs in on ``device`` ("cuda" or "cpu")."""
    if device == "cuda" or mode == "channels_last":
        return torch.channels_last
    return torch.contiguous_format


def _keep_batchnorm_fp32(torch, model):
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.float()
    return model


def input_dtype(torch, mode):
    return torch.float16 if mode == "half" else torch.float32


def autocast_dtype(torch, mode, device):
    """The dtype ``torch.autocast`` runs in for ``mode`` (None: no autocast): FP16 on CUDA, BF16 on CPU."""
    if mode != "autocast":
        return None
    return torch.float16 if device == "cuda" else torch.bfloat16


def prepare_model(torch, model, mode, device):
    """An eval-mode model (already on ``device``) made ready for ``mode``: ``.half()`` with BatchNorm FP32,
    the baseline's memory format, ``torch.compile`` last. Sets ``baseline_settings`` too."""
    baseline_settings(torch)
    model = model.eval()
    if mode == "half":
        model = _keep_batchnorm_fp32(torch, model.half())
    model = model.to(memory_format=memory_format(torch, mode, device))
    if mode == "compile":
        model = torch.compile(model)
    return model


def prepare_input(torch, x, mode, device):
    """A batch tensor (already on ``device``) in the mode's dtype and the baseline's memory format."""
    dtype = input_dtype(torch, mode)
    if x.dtype != dtype:
        x = x.to(dtype)
    if x.dim() == 4:
        x = x.contiguous(memory_format=memory_format(torch, mode, device))
    return x
