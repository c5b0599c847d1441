"""A kernel type added the documented way (docs/kernels.md, "Adding a kernel type"): one
catalog entry and one replay module. This module is the replay module (the spec and the
conversion of a traced call); `ENTRY` is the entry a package would hand `register` (an entry
point in the `pytest_npuperf.kernels` group) or a conftest would (the
`pytest_npuperf_register_kernels` hook)."""

from __future__ import annotations

import torch

from pytest_npuperf.kernels.entry import VECTOR, KernelEntry, Operator, SlotLayout
from pytest_npuperf.kernels.spec import SameCall

KERNEL_TYPE = "LeakyReluForTest"
F32 = "DT_FLOAT"

ENTRY = KernelEntry(
    (KERNEL_TYPE,), "activation", VECTOR, (SlotLayout("x", F32),), (SlotLayout("y", F32),),
    "torch.nn.functional.leaky_relu(x)", replay=f"{__name__}:LeakyRelu",
    # The simulator's name of the call, which a torch trace shows as aten::leaky_relu; its
    # slots are this module's to say (kernels/torch_ops.py has no conversion of that name).
    operators=(Operator("aten.leaky_relu.default", slots=f"{__name__}:leaky_relu_slots"),),
    grid={"description": "a leaky ReLU over the tokens of a step",
          "iterators": {"T": [1, 16, 256]}, "inputs": ["(T, 64)"], "outputs": ["(T, 64)"]})


class LeakyRelu(SameCall):  # torch dispatches it on every device (aclnn on an NPU)
    kernel_type = KERNEL_TYPE
    portable = "torch: leaky_relu(x)"
    work = "2*numel(x) flops; 2*numel(x)*bytes"

    def build_inputs(self, case, backend, generator):
        return {"x": self.tensor(case, 0, backend, generator)}

    def portable_call(self, tensors, case):
        x = tensors["x"]
        return lambda: torch.nn.functional.leaky_relu(x)

    def flops(self, case) -> float:
        return 2.0 * case.input(0).numel


def leaky_relu_slots(tensors):
    """A traced aten::leaky_relu call: x -> y, the same shape and dtype."""
    x = tensors[0]
    return [x], [(x[0], x[1], False, None)]
