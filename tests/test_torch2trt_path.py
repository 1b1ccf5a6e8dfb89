"""``--via torch2trt`` without a GPU: the caller's model is lent and given back, and the INT8 calibration dataset
has the shape torch2trt's own calibrator relies on.

torch2trt itself needs CUDA and ``import tensorrt``, so it cannot run here. The model handling runs for real on
CPU torch (``on_device`` with "meta", where nothing can be copied back, and through ``convert``, the function
``build_with_torch2trt`` converts with). The calibration adapter is pure; its tests state the properties of the
items that torch2trt's ``DatasetCalibrator`` relies on, citing its source (github.com/NVIDIA-AI-IOT/torch2trt):

- v0.4.0 ``torch2trt/calibration.py``: ``size = (batch_size,) + tuple(tensor.shape[1:])`` (the buffers, one per
  network input, ``batch_size = int8_calib_batch_size``); ``get_batch``: ``for i in range(self.batch_size)``,
  ``idx = self.count % len(self.dataset)``, ``for buffer, tensor in zip(self.buffers, inputs):
  buffer[i].copy_(tensor)``, returns ``[int(buf.data_ptr()) for buf in self.buffers]``.
  ``torch2trt/torch2trt.py``: ``inputs = [tensor.clone()[0:max_batch_size] ...]`` then
  ``network.add_input(shape=tuple(torch_input.shape))``: the network's input is the example's shape, and
  TensorRT reads one whole input from each pointer.
- v0.5.0 ``torch2trt/dataset_calibrator.py``: ``get_batch`` returns ``[int(t.data_ptr()) for t in
  self.flattener.flatten(self.dataset[self.count])]`` and ``get_batch_size`` returns 1; ``torch2trt.py`` sets
  ``config.set_calibration_profile(profile)`` with the example's shape as OPT: each item is one OPT batch.
"""

import numpy as np
import pytest

from trtkit.backends.tensorrt.torch2trt_path import calibration_dataset, convert, copies_per_image
from trtkit.errors import InputError
from trtkit.models.placement import on_device

torch = pytest.importorskip("torch")


def _model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 5))
    model.train()
    model[1].eval()  # a mixed state: one submodule already in eval mode
    return model


def _state(model):
    return dict((k, v.clone()) for k, v in model.state_dict().items())


def _same_place(model, state, weight, modes):
    assert model[0].weight is weight and model[0].weight.device.type == "cpu"
    assert all(t.device.type == "cpu" for t in list(model.parameters()) + list(model.buffers()))
    assert [m.training for m in model.modules()] == modes
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_on_device_lends_the_model_in_eval_mode_and_gives_it_back_as_it_was(device):
    model = _model()
    state, weight, modes = _state(model), model[0].weight, [m.training for m in model.modules()]
    with on_device(model, device) as placed:
        assert placed is model
        assert all(t.device.type == device for t in list(model.parameters()) + list(model.buffers()))
        assert not any(m.training for m in model.modules())
        assert placed(torch.zeros((2, 3, 6, 6), device=device)).shape == (2, 5)
    _same_place(model, state, weight, modes)
    with pytest.raises(RuntimeError, match="converter failed"):
        with on_device(model, "meta"):
            raise RuntimeError("converter failed")
    _same_place(model, state, weight, modes)


def test_convert_leaves_the_reference_model_where_it_was_for_the_verification_after_it():
    model = _model()
    state, weight, modes = _state(model), model[0].weight, [m.training for m in model.modules()]
    batch = torch.randn(2, 3, 6, 6)
    model.eval()
    with torch.no_grad():
        expected = model(batch)
    for m, training in zip(model.modules(), modes):
        m.training = training
    seen = {}

    def torch2trt(module, inputs, **kwargs):  # what the converter sees; it returns torch2trt's TRTModule
        seen["devices"] = set(t.device.type for t in list(module.parameters()) + list(module.buffers()))
        seen["training"] = any(m.training for m in module.modules())
        seen["grad"] = torch.is_grad_enabled()
        seen["example"] = (tuple(inputs[0].shape), inputs[0].device.type, module(*inputs).shape)
        seen["kwargs"] = kwargs
        return "engine module"

    assert convert(torch2trt, model, (4, 3, 6, 6), {"fp16_mode": True}, "meta") == "engine module"
    assert seen == {"devices": {"meta"}, "training": False, "grad": False,
                    "example": ((4, 3, 6, 6), "meta", (4, 5)), "kwargs": {"fp16_mode": True}}
    _same_place(model, state, weight, modes)
    model.eval()
    with torch.no_grad():  # the build's verification runs the reference on the CPU: it still can
        assert torch.equal(model(batch), expected)


def test_torch2trt_040_items_are_single_images_and_the_batch_size_is_the_networks_batch():
    images = np.arange(21 * 3 * 2 * 2, dtype=np.float32).reshape(21, 3, 2, 2)
    items, extra = calibration_dataset(images, 8, per_image=True)
    example = (8, 3, 2, 2)  # the network input: the example convert() gives torch2trt, (OPT, C, H, W)
    batch_size = extra["int8_calib_batch_size"]
    buffer_shape = (batch_size,) + example[1:]  # DatasetCalibrator's buffer: (batch_size,) + input.shape[1:]
    assert buffer_shape == example  # TensorRT reads one whole network input from the buffer's pointer
    assert len(items) % batch_size == 0  # else count % len(dataset) wraps around and repeats images
    for item in items:
        assert isinstance(item, (list, tuple)) and len(item) == 1  # zipped with the buffers: one per input
        # buffer[i].copy_(tensor): the item is exactly one image of the buffer's row (a whole batch cannot be
        # copied into a row; a smaller shape would silently broadcast)
        assert item[0].shape == buffer_shape[1:] and item[0].dtype == np.float32
    assert np.array_equal(np.stack([item[0] for item in items]), images[:16])  # in order, whole batches only


def test_torch2trt_050_items_are_whole_opt_batches_with_no_batch_size_keyword():
    images = np.arange(21 * 3 * 2 * 2, dtype=np.float32).reshape(21, 3, 2, 2)
    items, extra = calibration_dataset(images, 8, per_image=False)
    assert extra == {}  # get_batch_size() is 1 and 0.5 has no int8_calib_batch_size
    for item in items:  # each item's data_ptr() is read as one OPT batch (the calibration profile's OPT)
        assert len(item) == 1 and item[0].shape == (8, 3, 2, 2) and item[0].flags["C_CONTIGUOUS"]
    assert np.array_equal(np.concatenate([item[0] for item in items]), images[:16])
    with pytest.raises(InputError, match="fewer than one batch of 32"):
        calibration_dataset(images, 32, per_image=True)


def test_the_calibrator_design_is_read_from_torch2trts_signature():
    # the parameters of torch2trt.torch2trt in v0.4.0 and v0.5.0 (their torch2trt/torch2trt.py)
    def torch2trt_040(module, inputs, input_names=None, output_names=None, log_level=None, max_batch_size=1,
                      fp16_mode=False, max_workspace_size=1 << 25, strict_type_constraints=False, keep_network=True,
                      int8_mode=False, int8_calib_dataset=None, int8_calib_algorithm=None, int8_calib_batch_size=1,
                      use_onnx=False, default_device_type=None, dla_core=0, gpu_fallback=True, device_types={},
                      **kwargs):
        pass

    def torch2trt_050(module, inputs, input_names=None, output_names=None, log_level=None, fp16_mode=False,
                      max_workspace_size=1 << 25, strict_type_constraints=False, keep_network=True, int8_mode=False,
                      int8_calib_dataset=None, int8_calib_algorithm=None, use_onnx=False, default_device_type=None,
                      dla_core=0, gpu_fallback=True, device_types={}, min_shapes=None, max_shapes=None,
                      opt_shapes=None, onnx_opset=None, max_batch_size=None, avg_timing_iterations=None, **kwargs):
        pass

    assert copies_per_image(torch2trt_040) is True
    assert copies_per_image(torch2trt_050) is False
