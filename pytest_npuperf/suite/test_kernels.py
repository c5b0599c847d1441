"""Every row of the selected database is one case: replay its kernel and measure it.

    npuperf bench -k MatMul                     (in a clone: pytest bench -k MatMul)
    npuperf bench -k "RmsNorm and BF16" --npuperf-device cuda
    npuperf bench -m SwiGlu --npuperf-db <db root>/<DEVICE>/vllm_ascend/<VERSION>

The plugin parametrizes `npuperf_case` with the database rows (see `pytest --help`, section
npuperf) and writes the measurements back at the end of the session.
"""


def test_kernel(npuperf_case, npuperf_replay):
    npuperf_replay(npuperf_case)
