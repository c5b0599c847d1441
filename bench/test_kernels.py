"""`pytest bench` in a clone: the replay of every database row (`npuperf_case`) that ships
inside the package (pytest_npuperf/suite/test_kernels.py), collected here under the path
users and CI have always run."""

from pytest_npuperf.suite.test_kernels import test_kernel

__all__ = ["test_kernel"]
