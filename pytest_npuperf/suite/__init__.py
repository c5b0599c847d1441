"""The benchmark suite users run. It ships inside the package, beside the embedded default
database (pytest_npuperf/data), so that an installed copy replays from any directory:

    npuperf bench -k MatMul
    pytest --pyargs pytest_npuperf.suite -k MatMul

In a clone, `pytest bench -k MatMul` runs the same tests through bench/ at its root.
"""
