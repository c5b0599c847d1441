"""The end of a run (run/finish.py) holds every write of it: the demo model's profile is its
first step, run with plain values the target carries, before the results are written."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_npuperf.measure.clock import mint_run
from pytest_npuperf.measure.overhead import DEMO
from pytest_npuperf.replay.outcome import SessionInfo
from pytest_npuperf.run import model_profile
from pytest_npuperf.run.finish import RunFacts, finish_run
from pytest_npuperf.run.model_profile import DemoProfile


@dataclass
class _Written:
    target: Path | None
    notes: list[str] = field(default_factory=list)


@dataclass
class _Target:
    """A target that says when it was written."""

    demo: DemoProfile | None
    steps: list[str]
    reports_dir: Path | None = None
    inside: Path | None = None
    failed: str = "not written"
    interrupted: str = "interrupted while writing"

    def write(self, results: list, facts: RunFacts) -> _Written:
        self.steps.append("write")
        return _Written(Path("db"))


def _end(tmp_path: Path, steps: list[str], demo: DemoProfile | None):
    facts = RunFacts.of(mint_run(), source="db", record=False, reports=False)
    info = SessionInfo(run_id=facts.run_id, started=facts.started_iso, wall_s=1.0,
                       device={}, options={})
    notes = ["before the end"]
    end = finish_run(facts, [], _Target(demo, steps), info=lambda: info, notes=notes)
    return facts, end


def _demo(tmp_path: Path) -> DemoProfile:
    return DemoProfile(kind="cpu", device="cpu", database_device="CPU_x", stack={"torch": "2"},
                       source=tmp_path / "src", target=tmp_path / "copy")


def test_the_demo_profile_is_the_first_write_of_the_end_and_its_notes_are_reported(
        tmp_path, monkeypatch):
    steps: list[str] = []

    def profile(demo, *, run_id, stamp, notes):
        steps.append(("demo", demo.target, run_id, stamp))
        notes.append("model profile: the demo model ...")
        return True
    monkeypatch.setattr(model_profile, "profile_demo", profile)
    facts, end = _end(tmp_path, steps, _demo(tmp_path))
    assert steps == [("demo", tmp_path / "copy", facts.run_id, facts.stamp), "write"]
    assert end.ok and not end.interrupted
    # Said before the write: in the reports, in order.
    assert end.notes[:end.reported] == ["before the end", "model profile: the demo model ..."]
    assert DEMO in end.info.parts


def test_ctrl_c_in_the_demo_profile_ends_the_run_with_nothing_else_written(
        tmp_path, monkeypatch):
    steps: list[str] = []

    def interrupted(demo, *, run_id, stamp, notes):
        notes.append("interrupted while profiling the demo model")
        return False
    monkeypatch.setattr(model_profile, "profile_demo", interrupted)
    _, end = _end(tmp_path, steps, _demo(tmp_path))
    assert steps == []  # the results were not written
    assert end.interrupted and not end.ok and end.outcome is None
    assert end.notes[-1] == "interrupted while profiling the demo model"


def test_a_target_without_a_demo_profile_is_written_directly(tmp_path, monkeypatch):
    steps: list[str] = []
    monkeypatch.setattr(model_profile, "profile_demo", lambda *a, **k: pytest.fail("profiled"))
    _, end = _end(tmp_path, steps, None)
    assert steps == ["write"] and end.ok and DEMO not in end.info.parts
