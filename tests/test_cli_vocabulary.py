"""One vocabulary on every verb: `--db` for a database, `--profile` for profiler output,
`--threshold` for the minimum effect; the old names still work and say what the new one is;
several inputs where one makes sense; every writer creates the directory it writes into."""

from __future__ import annotations

import pytest

from pytest_npuperf.cli import main
from pytest_npuperf.cli.parser import build_parser
from pytest_npuperf.db.table import read_table
from tests.real_samples import REALDATA, needs

KERNEL_TABLE = REALDATA / "kernel_details" / "mstt_advisor_compute_advice_2025_kernel_details.csv"
NCCL_LOG = REALDATA / "nccl_tests" / "lessizzmore_a3mega_H100x16_all_reduce_perf.txt"
needs_realdata = needs(KERNEL_TABLE, NCCL_LOG)

# verb -> (the vocabulary's options it has, the old spellings it still accepts)
VOCABULARY = {
    "parse": ({"--db", "--profile"}, {"--database-path", "--profiling-path"}),
    "profile": ({"--db"}, {"--parse-into"}),
    "backfill": ({"--db", "--profile", "--threshold"},
                 {"--database-path", "--prof-path", "--regression-threshold"}),
    "validate": ({"--db"}, set()),
    "grid": ({"--db"}, {"--data-dir"}),
    "merge": ({"--db"}, {"--database"}),
    "comm-validate": ({"--db"}, {"--csv-dir"}),
    "import-nccl-tests": ({"--db"}, {"--database-path"}),
    "compare": ({"--threshold"}, set()),
}


def _options(verb: str) -> set[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[verb]
    return {s for action in sub._actions for s in action.option_strings}


@pytest.mark.parametrize("verb", sorted(VOCABULARY))
def test_every_verb_names_its_database_profile_and_threshold_alike(verb):
    new, old = VOCABULARY[verb]
    assert new | old <= _options(verb)


@needs_realdata
def test_an_old_name_works_and_says_the_new_one_once(tmp_path, capsys):
    code = main(["parse", "--profiling-path", str(KERNEL_TABLE), "--database-path",
                 str(tmp_path / "db"), "--quiet"])
    err = capsys.readouterr().err.splitlines()
    assert code == 0
    assert err == ["npuperf parse: note: --profiling-path is now --profile (the old name still "
                   "works)",
                   "npuperf parse: note: --database-path is now --db (the old name still works)"]
    assert (tmp_path / "db" / "MatMulV3.csv").is_file()


@needs_realdata
def test_parse_takes_several_inputs_and_reads_each_once(tmp_path, capsys):
    copy = tmp_path / "rank1" / "kernel_details.csv"
    copy.parent.mkdir()
    copy.write_bytes(KERNEL_TABLE.read_bytes())
    code = main(["parse", "--profile", str(KERNEL_TABLE), str(copy.parent), str(KERNEL_TABLE),
                 "--db", str(tmp_path / "db"), "--quiet"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("read 2 kernel table(s)"), out
    # Two ranks of the same run: every kernel counted twice (the file named twice: once).
    single = tmp_path / "single"
    assert main(["parse", "--profile", str(KERNEL_TABLE), "--db", str(single), "--quiet"]) == 0
    counts = read_table(tmp_path / "db" / "MatMulV3.csv")["Profiling Count"].astype(int)
    once = read_table(single / "MatMulV3.csv")["Profiling Count"].astype(int)
    assert (counts == 2 * once).all()


@needs_realdata
def test_writers_create_their_target_directories(tmp_path, capsys):
    hccl = tmp_path / "CUDA_X" / "hccl" / "vnccl2.21"
    assert main(["import-nccl-tests", str(NCCL_LOG), "--db", str(hccl)]) == 0
    assert (hccl / "hcom_allReduce_.csv").is_file()
    report = tmp_path / "reports" / "deep" / "comm.md"
    assert main(["comm-validate", "--db", str(hccl), "--report", str(report)]) in (0, 1)
    assert report.read_text().startswith("#")
    db = tmp_path / "db"
    assert main(["parse", "--profile", str(KERNEL_TABLE), "--db", str(db), "--quiet"]) == 0
    merged = tmp_path / "merged" / "vllm0.18.0_torch2.9.0_cann8.5"
    assert main(["merge", str(db), "--db", str(merged)]) == 0
    assert sorted(p.name for p in merged.glob("*.csv")) == sorted(p.name for p in db.glob("*.csv"))
    capsys.readouterr()


def test_validate_takes_db_or_paths_and_says_when_neither_is_given(tmp_path, capsys):
    assert main(["validate"]) == 2
    assert "give the database to check: --db DIR" in capsys.readouterr().err


def test_the_plugin_reads_its_threshold_under_the_new_name_and_the_old(pytester):
    pytester.makepyfile(test_x="""
        from pytest_npuperf.harness.options import read_settings

        def test_threshold(request):
            print("threshold", read_settings(request.config).regression_threshold)
    """)
    new = pytester.runpytest_subprocess("--npuperf-threshold", "0.2", "-s", "-q")
    assert "threshold 0.2" in new.stdout.str() and "note" not in new.stderr.str()
    old = pytester.runpytest_subprocess("--npuperf-regression-threshold", "0.3", "-s", "-q")
    assert "threshold 0.3" in old.stdout.str()
    assert ("npuperf: note: --npuperf-regression-threshold is now --npuperf-threshold (the old "
            "name still works)") in old.stderr.str()
