"""Collective benchmarks: size sweeps across ranks, written to the hcom tables (CONTRACT.md §7).

Light at import (the plugin loads the option vocabulary in every pytest run): the modules that
need torch (`channel`, `runtime`, `buffers`, `measure`) or pandas (`table`) are imported by
name where they are used.

- `ops`: the five collectives, their tables, dtypes, message sizes and bus-bandwidth factors
- `sweep`: sweep points, rank groups and their topology tier from the grid shape
- `model`: the analytic model and the PASS / WARN / FAIL rule; `validate`: `npuperf comm-validate`
- `importers`: nccl-tests and HCCL Test output to table rows
- `table`: upsert into `hcom_<op>_.csv` through a database transaction
- `channel`, `runtime`, `buffers`, `measure`: process groups, buffers and the measurement loop
- `session`: the pytest session of collective cases (rank 0 writes)
"""
