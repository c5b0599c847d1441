"""`pytest bench` in a clone: the collective sweep (`npuperf_comm_case`) that ships inside the
package (pytest_npuperf/suite/test_collectives.py), collected here under the path users and
CI have always run."""

from pytest_npuperf.suite.test_collectives import test_collective

__all__ = ["test_collective"]
