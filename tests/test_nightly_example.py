"""The nightly workflow example names only options and commands that exist."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from pytest_npuperf.cli.parser import build_parser
from pytest_npuperf.harness.options import _OPTIONS

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "nightly.yml"


def test_the_nightly_example_uses_real_options_and_verbs():
    text = EXAMPLE.read_text()
    workflow = yaml.safe_load(text)
    assert {"replay", "merge"} <= set(workflow["jobs"])
    assert workflow["jobs"]["replay"]["strategy"]["fail-fast"] is False
    options = {f"--npuperf-{name}" for name, *_ in _OPTIONS}
    used = set(re.findall(r"--npuperf-[a-z-]+", text))
    assert used and used <= options, used - options
    verbs = set(build_parser()._subparsers._group_actions[0].choices)
    assert set(re.findall(r"npuperf (\w+) ", text)) <= verbs
    for needed in ("--npuperf-baseline last-good", "--npuperf-shard", "npuperf merge",
                   "upload-artifact", "schedule"):
        assert needed in text
