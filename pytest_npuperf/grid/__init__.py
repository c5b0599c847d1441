"""The shape grid: theory rows a model family can produce, reproducibly, within a memory budget.

Public API (used by `npuperf grid` and the pytest plugin's `--npuperf-grid`):

- `generate_rows(kernels, *, config_path, target_models, model_file, rows, seed, max_hbm_gb,
  existing)` -> {kernel type: [row dicts]}: the new rows, nothing written.
- `run_grid(data_dir, kernels, *, ..., dry_run)` -> GridSummary: the whole `npuperf grid` job.

See config.py for the configuration schema and models.py for model descriptions.
"""

from .config import DEFAULT_MAX_HBM_GB, DEFAULT_ROWS, DEFAULT_SEED, PACKAGED_CONFIGS, load_config
from .errors import (
    BudgetError,
    ConfigError,
    ExpressionError,
    GridError,
    UnknownKernelError,
    UnknownModelError,
    UnsafeExpressionError,
)
from .job import GridSummary, candidate_row, generate_rows, resolve_settings, run_grid
from .models import BUILTIN_MODELS, Model, ModelRegistry, load_model_file

__all__ = [
                     "BUILTIN_MODELS",
                     "DEFAULT_MAX_HBM_GB",
                     "DEFAULT_ROWS",
                     "DEFAULT_SEED",
                     "PACKAGED_CONFIGS",
                     "BudgetError",
                     "ConfigError",
                     "ExpressionError",
                     "GridError",
                     "GridSummary",
                     "Model",
                     "ModelRegistry",
                     "UnknownKernelError",
                     "UnknownModelError",
                     "UnsafeExpressionError",
                     "candidate_row",
                     "generate_rows",
                     "load_config",
                     "load_model_file",
                     "resolve_settings",
                     "run_grid",
]
