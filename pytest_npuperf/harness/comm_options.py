"""The collective options of a pytest session (`--npuperf-comm-*`, `--npuperf-grid-shape`,
their ini keys), checked once: a mistake is one usage-error line. Light: no torch."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from ..comm.launch import RankEnv
from ..comm.ops import dtype_named, op_named, parse_size
from ..comm.sweep import MAX_TIER, SweepSpec, check_grid, default_grid, power_sizes
from .options import option_value

_SPLIT = re.compile(r"[,\s]+")


@dataclass(frozen=True)
class CommSettings:
    spec: SweepSpec
    timeout_s: float
    version: str | None


def _items(text: object) -> list[str]:
    return [t for t in _SPLIT.split(str(text or "").strip()) if t]


def _ints(name: str, text: object, low: int) -> tuple[int, ...]:
    values = []
    for token in _items(text):
        if not (token.isascii() and token.isdigit()) or int(token) < low:
            raise pytest.UsageError(f"npuperf_{name.replace('-', '_')}: {token!r} is not a whole "
                                    f"number >= {low}")
        values.append(int(token))
    return tuple(values)


def read_comm_settings(config: pytest.Config, env: RankEnv) -> CommSettings:
    def value(name: str) -> object:
        return option_value(config, name)

    try:
        ops = tuple(dict.fromkeys(op_named(t).name for t in _items(value("comm-ops"))))
        dtypes = tuple(dict.fromkeys(dtype_named(t) for t in _items(value("comm-dtypes"))))
        explicit = _items(value("comm-sizes"))
        if explicit:
            sizes = tuple(sorted({parse_size(t) for t in explicit}))
        else:
            sizes = tuple(power_sizes(parse_size(str(value("comm-min-bytes"))),
                                      parse_size(str(value("comm-max-bytes"))),
                                      int(value("comm-step-factor"))))
        grid_text = value("grid-shape")
        grid = (check_grid(_ints("grid-shape", grid_text, 1)) if grid_text
                else default_grid(env.world, env.local_world))
    except ValueError as exc:
        raise pytest.UsageError(f"npuperf collective options: {exc}") from None
    if not ops or not dtypes:
        raise pytest.UsageError("npuperf collective options: no op or no dtype to sweep")
    tiers = _ints("comm-tiers", value("comm-tiers"), 0)
    if any(t > MAX_TIER for t in tiers):
        raise pytest.UsageError(f"npuperf_comm_tiers: tiers are 0 (inter-pod), 1 (intra-pod), "
                                f"2 (die-level); got {list(tiers)}")
    timeout = float(value("comm-timeout"))
    if not timeout > 0:
        raise pytest.UsageError(f"npuperf_comm_timeout: {timeout} is not a number of seconds > 0")
    spec = SweepSpec(ops=ops, dtypes=dtypes, sizes=sizes,
                     group_sizes=_ints("comm-ranks", value("comm-ranks"), 1), tiers=tiers,
                     grid=grid)
    version = value("comm-version")
    return CommSettings(spec, timeout, str(version) if version else None)
