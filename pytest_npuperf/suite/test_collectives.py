"""Every collective sweep point is one case, run by every rank of a torchrun job in lockstep.

    torchrun --nproc-per-node 8 -m pytest --pyargs pytest_npuperf.suite -k all_reduce
    npuperf bench -k "all_gather and 16MiB" --npuperf-nproc 2
    torchrun --nnodes 2 --node-rank R --rdzv-backend c10d --rdzv-endpoint HOST:29400 \\
        --nproc-per-node 8 -m pytest --pyargs pytest_npuperf.suite -k all_to_all \\
        --npuperf-grid-shape "2 8"

In a clone, `pytest bench` does what `pytest --pyargs pytest_npuperf.suite` does.

The plugin parametrizes `npuperf_comm_case` with the sweep (see `pytest --help`, section
npuperf: --npuperf-comm-*); rank 0 writes the hcom tables at the end of the session.
"""


def test_collective(npuperf_comm_case, npuperf_collective):
    npuperf_collective(npuperf_comm_case)
