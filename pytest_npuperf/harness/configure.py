"""The set-up of every pytest run the plugin is loaded in (pytest_configure): markers, the
checks a mistaken option must fail with as one usage-error line, the run's roles, and the
hooks of the result collector and of pytest-html.

Light on purpose: this runs in every pytest run, also those without a replay case.
"""

from __future__ import annotations

import sys

import pytest

from ..comm import launch
from ..comm.launch import RankEnv, xdist_in_use
from ..comm.ops import OP_NAMES
from .comm_options import read_comm_settings
from .options import check_usage, renamed_notes
from .stash import choose_roles, mark_start


def rank_env() -> RankEnv:
    """This process's place in a torchrun job (rank 0 of 1 outside one)."""
    try:
        return launch.rank_env()
    except ValueError as exc:
        raise pytest.UsageError(f"npuperf: {exc}") from None


def configure(config: pytest.Config) -> None:
    mark_start(config)
    choose_roles(config)
    from .receiver import ResultReceiver

    config.pluginmanager.register(ResultReceiver(config), "npuperf-results")
    config.addinivalue_line("markers", "npuperf: a replay case of pytest_npuperf")
    for op in OP_NAMES:
        config.addinivalue_line("markers", f"{op}: collective cases of {op}")
    env = rank_env()
    read_comm_settings(config, env)  # a bad collective option: one usage-error line
    if env.launched:
        if xdist_in_use(config.option):
            raise pytest.UsageError("npuperf: under torchrun every rank is one pytest process; "
                                    "xdist (-n / --dist) cannot be used: drop it")
        if env.rank > 0:
            config.option.verbose = min(config.option.verbose, -1)  # rank 0 reports
    if config.pluginmanager.hasplugin("html"):
        from . import html_hooks

        config.pluginmanager.register(html_hooks, "npuperf-html")
    check_usage(config)  # a UsageError from here is one line
    if not hasattr(config, "workerinput"):  # said once, by the process the user started
        for note in renamed_notes(config):
            print(f"npuperf: note: {note}", file=sys.stderr)
