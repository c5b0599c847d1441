"""Collective benchmarks: size sweeps across ranks, written to the hcom tables (CONTRACT.md §7).

Light at import (the plugin loads the option vocabulary in every pytest run): the modules that
need torch (`channel`, `runtime`, `buffers`, `timing`, `lockstep`) or pandas (`table`,
`model_check`, `log_import`) are imported by name where they are used.

- `ops`: the five collectives, their tables, dtypes, message sizes and bus-bandwidth factors
- `sweep`: sweep points, rank groups and their topology tier from the grid shape
- `launch`: torchrun's rank variables and `--npuperf-nproc`'s re-launch
- `channel`, `runtime`: process groups (measured, control) and the calls on them
- `buffers`, `timing`, `collective_result`: one case's buffers, its measurement in lockstep,
  its check and its result
- `lockstep`: the ranks' selections compared before the first collective
- `guard`: the watchdog and torchrun's SIGTERM
- `table`: upsert into `hcom_<op>_.csv` through a database transaction
- `model`, `model_check`: the analytic model and `npuperf comm-validate`
- `importers`, `log_import`: nccl-tests and HCCL Test output, `npuperf import-nccl-tests`

The pytest session that drives them is `pytest_npuperf/harness/comm_session.py`; its reports
are report/collectives.py.
"""
