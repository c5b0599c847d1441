"""The hooks pytest_npuperf adds to pytest (registered by the plugin's `pytest_addhooks`)."""

from __future__ import annotations

import pytest


@pytest.hookspec
def pytest_npuperf_register_kernels(register) -> None:
    """Register replays of your own kernels, before the database's rows become cases.

    Called once per process that collects or runs replay cases. `register(kernel)` takes a
    `KernelSpec` subclass, a `KernelEntry` (catalog metadata naming its replay as
    "module:Class"), or a function that registers several; see
    `pytest_npuperf.kernels.extensions`. For example, in a conftest.py::

        def pytest_npuperf_register_kernels(register):
            from my_kernels import MyFusedNorm  # a KernelSpec subclass
            register(MyFusedNorm)

    Kernels a package registers through the `pytest_npuperf.kernels` entry point group are
    registered first, in every run (and in `npuperf kernels`).
    """
