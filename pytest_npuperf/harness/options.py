"""The plugin's options: command line and `[tool.pytest.ini_options]` alike.

Loaded with the plugin in every pytest run, so it imports only light modules (no torch,
numpy or pandas): the option vocabulary lives in `devices.KINDS` and `measure.policy`.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from ..db.errors import NpuperfError
from ..db.files import check_database_dir
from ..db.layout import check_device
from ..devices import KINDS
from ..kernels.cache_state import CACHE_MODES
from ..measure.policy import DEFAULT_REGRESSION_THRESHOLD as DEFAULT_THRESHOLD
from ..measure.policy import (
    METHOD_EVENTS,
    METHOD_GRAPH,
    METHOD_PROFILER,
    PROFILER_AUTO,
    PROFILERS,
    STATISTICS,
    UPDATE_MODES,
    SamplingPolicy,
    case_timeout,
)

# Package data, not a path under the rootdir: an installed copy replays it from any directory.
DEFAULT_DB = (Path(__file__).resolve().parents[1] / "data" / "ATLAS_800_A3_752T_128G_DIE" / "vllm_ascend"
              / "vllm0.18.0_torch2.9.0_cann8.5")
DEFAULT_OUT = Path("npuperf-out")
METHODS = ("auto", METHOD_GRAPH, METHOD_EVENTS, METHOD_PROFILER)
_DEFAULTS = SamplingPolicy()

# name, type, default, help, choices
_OPTIONS: tuple[tuple[str, str, object, str, tuple[str, ...] | None], ...] = (
    ("db", "path", None, "database version directory whose rows become cases "
     "(default: the embedded database inside the package, pytest_npuperf/data/...; read "
     "only: this device's results go under --npuperf-out)", None),
    ("device", "str", "auto", "device to measure on: auto picks npu, then cuda, then cpu", KINDS),
    ("device-name", "str", None, "database <DEVICE> name of the measuring device (default: "
     "derived from the device; on an NPU, the database's own Atlas device)", None),
    ("update-mode", "str", "all", "all rows, or only rows without a valid Average Duration(us) "
     "in the database being written", UPDATE_MODES),
    ("prune-empty-duration-rows", "bool", False, "after the write, delete rows that have neither a "
     "replay nor a profiling duration", None),
    ("dry-run", "bool", False, "measure, but write nothing (no database, no reports)", None),
    ("out", "path", None, "directory for reports and for databases of other devices "
     f"(default: {DEFAULT_OUT} under the rootdir)", None),
    ("method", "str", "auto", "graph: kernel device time from CUDA-graph / NPUGraph replays "
     "of a batch of calls (a call that cannot be captured falls back to profiler, then events; "
     "on an NPU to events); events: device events / synchronised clock around each call "
     "(launch included); profiler: device time of the case's kernels from torch.profiler; "
     "auto: graph on cuda (profiler with --npuperf-flush-l2), graph on an NPU unless msprof "
     "wraps the session or --npuperf-profiler torch_npu is asked for (events then, their "
     "kernel times replace them; events with --npuperf-flush-l2), events on cpu", METHODS),
    ("threads", "count", None, "torch intra-op threads of a CPU session (default: the cores "
     "available to the process divided by the xdist workers, at least 1)", None),
    ("warmup", "int", _DEFAULTS.warmup, "calls before sampling, at most (see --npuperf-warmup-time)",
     None),
    ("warmup-time", "float", _DEFAULTS.warmup_time_s, "stop warming up once this many seconds "
     "went into warmup calls, after one call at least (0: always --npuperf-warmup calls)", None),
    ("min-samples", "int", _DEFAULTS.min_samples, "minimum samples per case", None),
    ("max-samples", "int", _DEFAULTS.max_samples, "maximum samples per case", None),
    ("budget", "float", _DEFAULTS.budget_s, "seconds a case may take, wall time: its inputs, "
     "warm-up and samples (each implementation of a best-of an equal share of what is left); "
     "sampling stops there once it has --npuperf-min-samples, and a case that could not fit "
     "says so in its note", None),
    ("min-time", "float", _DEFAULTS.min_time_s, "seconds of measured calls per case at least", None),
    ("precision", "float", _DEFAULTS.precision, "stop when the 95 percent CI half-width of "
     "the statistic is below this fraction of it", None),
    ("statistic", "str", _DEFAULTS.statistic, "statistic stored in Average Duration(us), "
     "whose precision stops sampling", STATISTICS),
    ("cache", "str", "model", "the cache state each case is measured in: model (the inputs a "
     "model reads from memory at every call, weights, KV caches, experts, embedding tables, "
     "are rotated through enough copies to exceed the last-level cache, so they are read cold; "
     "activations stay warm, as the op before just wrote them), cold (every input rotated), "
     "warm (one set of inputs, all cached); recorded in MicroBench Cache", CACHE_MODES),
    ("flush-l2", "bool", False, "evict the L2 (last-level) cache before every sample", None),
    ("impl", "str", "auto", "which implementation of each kernel type runs (npuperf kernels "
     "lists them per device): eager (the portable path), compiled (torch.compile), npu (the "
     "NPU operator), a vendor library (vllm, liger, flash-attn...), best (every available "
     "one, verified, the fastest stored), all (one case per implementation: -k compiled "
     "selects them) or auto: best on a GPU, npu on an NPU, eager on a CPU; recorded in "
     "MicroBench Implementation", None),
    ("preempted", "str", "reject", "on a CPU, a sample during which the host ran other "
     "processes (wall time above the CPU time the process got) is not a sample of the kernel: "
     "reject leaves such samples out (too few undisturbed ones within the budget: the case is "
     "noisy, its value kept out of the database); keep keeps them, counted", ("reject", "keep")),
    ("case-timeout", "float", 0.0, "fail a case that runs longer than this many seconds "
     "(0: no limit)", None),
    ("verify", "bool", False, "before measuring the first case of each kernel type, compare "
     "the device output with the portable path run on the CPU in float64; fail the case "
     "beyond a dtype-aware tolerance (on a CPU-only run: the portable path against itself "
     "in float64)", None),
    ("verify-every", "int", 0, "with --npuperf-verify, also verify every Nth case of each "
     "kernel type (1: every case; 0: only the first)", None),
    ("history", "str", None, "SQLite file every run is recorded in, whole or not at all "
     "(default: history.sqlite in --npuperf-out); none: keep no history", None),
    ("baseline", "str", None, "compare each case's samples with a baseline: last (each case's "
     "newest earlier measurement on this device), last-good (the same in passed runs), a run "
     "id, a history file or a run_<stamp>.json; a case found SLOWER fails", None),
    ("threshold", "float", DEFAULT_THRESHOLD, "minimum effect: a case is SLOWER "
     "(or FASTER) only when its median moved by at least this fraction and the rank test "
     "says the difference is significant", None),
    ("resume", "str", None, "continue a run that did not end writing its results (stopped, "
     "killed, its host lost): RUN (a run id) or last; the cases its journal (<out>/runs/"
     "<run>.jsonl) holds are taken from it, the others measured, and all are written", None),
    ("table", "str", "5", "the results table at the end of the session: N (the N worst and N "
     "best cases, by the change against the baseline, else the share of the roofline bound "
     "reached, else the value), all, or none", None),
    ("progress", "str", "auto", "a progress line with the cases done, the rate and the time "
     "left: auto (on a terminal every 10 s, in a log every 60 s, only in sessions that run "
     "longer than that), SECONDS between lines, or none", None),
    ("no-figures", "bool", False, "draw no figures in the html reports (their tables stay): "
     "smaller reports for very large runs", None),
    ("shard", "str", None, "run only shard I of N (I/N, 1-based): cases are split by a "
     "stable hash of their id, so N hosts with 1/N..N/N run every case once", None),
    # Collective cases (bench/test_collectives.py; pytest_npuperf/comm).
    ("comm-ops", "str", "all_reduce,all_gather,reduce_scatter,all_to_all,broadcast",
     "collectives to sweep, comma-separated", None),
    ("comm-dtypes", "str", "BF16", "collective dtypes, comma-separated: BF16, FLOAT16, FLOAT, "
     "INT8 (and FLOAT8_E4M3, FLOAT8_E5M2 where the backend has them)", None),
    ("comm-min-bytes", "str", "1KiB", "smallest message of the size sweep (binary units: 1K = "
     "1KiB = 1024)", None),
    ("comm-max-bytes", "str", "512MiB", "largest message of the size sweep", None),
    ("comm-step-factor", "int", 2, "factor between consecutive sweep sizes", None),
    ("comm-sizes", "str", None, "explicit message sizes, comma-separated (e.g. 4K,1M,16MiB); "
     "replaces min/max/step", None),
    ("comm-ranks", "str", None, "group sizes to measure, comma-separated (default: every rank "
     "of the job)", None),
    ("comm-tiers", "str", None, "topology tiers to measure each group size at, comma-separated: "
     "the group spreads over that grid dimension (default: the tier of ranks 0..n-1)", None),
    ("grid-shape", "str", None, "rank grid, outermost dimension first: A3 '48 8 2' (pods, "
     "nodes, dies), A2 '128 8'; a group's topology tier is the outermost dimension its ranks "
     "differ on (default: nodes x ranks per node of the job)", None),
    ("comm-timeout", "float", 300.0, "seconds a collective waits for the other ranks before "
     "its case fails (a dead or hung rank); the session then ends and writes what it measured",
     None),
    ("comm-version", "str", None, "version directory of the hcom tables under "
     "<DEVICE>/hccl/ (default: v<CANN> on an NPU, vnccl<version> on CUDA, vgloo-torch<version> "
     "on CPU)", None),
    ("nproc", "count", None, "re-launch this pytest invocation under torchrun with N ranks on "
     "this node (for collective cases) and return its exit status", None),
    ("profiler", "str", PROFILER_AUTO, "where NPU kernel times come from: msprof re-runs this "
     "command as a child under the msprof command line and stores the kernel device times and "
     "counters msprof recorded inside each case's mstx range; torch_npu runs one "
     "torch_npu.profiler session around the whole session; none keeps the in-case timing; "
     "auto: msprof on an NPU host where the msprof command is found (and the run's test files "
     "name npuperf_case), else torch_npu there unless the cases are timed from NPUGraph "
     "replays (--npuperf-method auto or graph), none elsewhere", PROFILERS),
    ("keep-prof", "bool", False, "keep the raw profiler output under <out>/msprof (or "
     "<out>/torch_npu) after a successful run; it is always kept when something went wrong",
     None),
    ("model-profile", "str", "auto", "replaying the embedded default database on a CPU or a "
     "GPU: profile the demo model (a transformer block whose GEMMs are rows of that database) "
     "on this device once, and parse it into this device's database, so that the gap report "
     "compares each replay with the same kernel inside a model; auto: once per device (the "
     "trace is kept in <database>/profiles/), off: never", ("auto", "off")),
    ("strict-stack", "bool", False, "on an NPU, a database version directory that does not "
     "match the running vLLM-Ascend / torch / CANN versions is an error (default: a warning)",
     None),
)


# Options renamed to the vocabulary every npuperf command shares: new name -> old name. The
# old flag and ini name are still read; the flag says it is old (`renamed_notes`).
RENAMED = {"threshold": "regression-threshold"}


def _ini_name(name: str) -> str:
    return "npuperf_" + name.replace("-", "_")


def _count(text: str) -> int:
    """A count of at least 1 (argparse reports the error as a usage error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count of at least 1")
    return value


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("npuperf", "operator performance database replay (pytest_npuperf)")
    for name, kind, default, help_text, choices in _OPTIONS:
        flag = f"--npuperf-{name}"
        shown = f" (default: {default})" if default not in (None, False) else ""
        kwargs: dict[str, object] = {"dest": _ini_name(name), "default": None,
                                     "help": f"{help_text}{shown} [ini: {_ini_name(name)}]"}
        if kind == "bool":
            kwargs["action"] = "store_true"
        else:
            kwargs["type"] = {"int": int, "float": float, "count": _count}.get(kind, str)
            kwargs["metavar"] = name.split("-")[-1].upper()
            if choices:
                kwargs["choices"] = choices
        old = [f"--npuperf-{RENAMED[name]}"] if name in RENAMED else []
        group.addoption(flag, *old, **kwargs)
        ini_type = {"bool": "bool", "path": "string"}.get(kind, "string")
        for ini in [name, *([RENAMED[name]] if name in RENAMED else [])]:
            parser.addini(_ini_name(ini), help_text, type=ini_type,
                          default=default if kind == "bool" else None)
    grid_help = ("turn shape-grid points into cases instead of database rows (a grid config "
                 "file, or a packaged one: default, embedded_db); nothing is written to a "
                 "database")
    group.addoption("--npuperf-grid", dest="npuperf_grid", nargs="?", const="default",
                    default=None, metavar="CONFIG", help=f"{grid_help} [ini: npuperf_grid]")
    parser.addini("npuperf_grid", grid_help, type="string", default=None)


def _value(config: pytest.Config, name: str, kind: str, default: object,
           choices: tuple[str, ...] | None) -> object:
    dest = _ini_name(name)
    value = config.getoption(dest)
    if value is None or value is False:
        for ini_name in [dest, *([_ini_name(RENAMED[name])] if name in RENAMED else [])]:
            ini = config.getini(ini_name)
            if ini not in (None, ""):
                value = ini
                break
    if value is None or (kind == "bool" and not value):
        value = default
    if kind in ("int", "float", "count") and isinstance(value, str):
        try:
            value = float(value) if kind == "float" else int(value)
        except ValueError:
            raise pytest.UsageError(f"{dest}: expected a number, got {value!r}") from None
    if choices and value not in choices:
        raise pytest.UsageError(f"{dest}: {value!r} is not one of {', '.join(choices)}")
    return value


def option_value(config: pytest.Config, name: str) -> object:
    """One option of `_OPTIONS` as the command line, else the ini file, else its default."""
    for option, kind, default, _, choices in _OPTIONS:
        if option == name:
            return _value(config, name, kind, default, choices)
    raise KeyError(name)


def renamed_notes(config: pytest.Config) -> list[str]:
    """What the old option names used in this run are called now."""
    args = [str(a).split("=", 1)[0] for a in config.invocation_params.args]
    notes = []
    for name, old in RENAMED.items():
        if f"--npuperf-{old}" in args:
            notes.append(f"--npuperf-{old} is now --npuperf-{name} (the old name still works)")
        if config.getini(_ini_name(old)) not in (None, ""):
            notes.append(f"ini {_ini_name(old)} is now {_ini_name(name)} (the old name still "
                         f"works)")
    return notes


def check_usage(config: pytest.Config) -> None:
    """Options a user gave explicitly, checked in pytest_configure so that a mistake is one
    `ERROR:` line (a UsageError there), not a collection traceback: a device name that is not
    one plain directory name, a `--npuperf-db` that is no directory. Light: no database read."""
    name = config.getoption(_ini_name("device-name")) or config.getini(_ini_name("device-name"))
    if name:
        try:
            check_device(str(name))
        except NpuperfError as exc:
            raise pytest.UsageError(f"npuperf_device_name: {exc}") from None
    grid = config.getoption("npuperf_grid") or config.getini("npuperf_grid")
    db = config.getoption(_ini_name("db")) or config.getini(_ini_name("db"))
    if db and not grid:
        check_db_dir(Path(db))


def check_db_dir(path: Path) -> None:
    """A UsageError unless `path` is a directory (say what it is instead)."""
    try:
        check_database_dir(path, "--npuperf-db")
    except NpuperfError as exc:
        raise pytest.UsageError(str(exc)) from None


@dataclass(frozen=True)
class Settings:
    db: Path
    device: str
    device_name: str | None
    update_mode: str
    prune_empty: bool
    dry_run: bool
    out: Path
    method: str
    policy: SamplingPolicy
    case_timeout_s: float | None
    grid: str | None
    threads: int | None = None  # None: the default share of the cores
    verify: int | None = None  # None: off; 0: first case per kernel type; N: also every Nth
    history: Path | None = None  # None: no history kept
    baseline: str | None = None
    regression_threshold: float = DEFAULT_THRESHOLD
    shard: tuple[int, int] | None = None  # (i, n), 1-based
    figures: bool = True
    profiler: str = PROFILER_AUTO  # as requested; RunContext.profiler resolves it
    model_profile: bool = True  # the demo model profiled once per device (embedded database)
    cache: str = "model"  # the cache state measured in (kernels/cache_state.py)
    impl: str = "auto"  # --npuperf-impl, as given (RunContext.impl resolves auto)
    resume: str | None = None  # the run whose journal this one continues
    embedded: bool = False  # the cases come from the embedded default database
    keep_prof: bool = False
    strict_stack: bool = False
    table: int | None = 5  # the results table: N worst and best, None every case, 0 none
    progress: float | None = None  # seconds between progress lines; None: auto; 0: none

    def as_dict(self) -> dict[str, object]:
        return {"db": str(self.db), "device": self.device, "update_mode": self.update_mode,
                "prune_empty": self.prune_empty, "dry_run": self.dry_run, "out": str(self.out),
                "method": self.method, "case_timeout_s": self.case_timeout_s,
                "policy": asdict(self.policy), "grid": self.grid, "threads": self.threads,
                "verify": self.verify, "history": None if self.history is None else str(self.history),
                "baseline": self.baseline, "regression_threshold": self.regression_threshold,
                "shard": None if self.shard is None else f"{self.shard[0]}/{self.shard[1]}",
                "profiler": self.profiler, "figures": self.figures,
                "keep_prof": self.keep_prof, "strict_stack": self.strict_stack,
                "model_profile": self.model_profile, "cache": self.cache, "impl": self.impl,
                "resume": self.resume, "table": self.table, "progress": self.progress}


def is_embedded(db: Path) -> bool:
    """Whether `db` is the embedded database, however it was named."""
    return db.resolve() == DEFAULT_DB


def read_settings(config: pytest.Config) -> Settings:
    values = {name: _value(config, name, kind, default, choices)
              for name, kind, default, _, choices in _OPTIONS}
    root = Path(config.rootpath)
    db = Path(values["db"]) if values["db"] else DEFAULT_DB
    out = Path(values["out"]) if values["out"] else root / DEFAULT_OUT
    try:
        policy = SamplingPolicy(
            warmup=int(values["warmup"]), warmup_time_s=float(values["warmup-time"]),
            min_samples=int(values["min-samples"]),
            max_samples=int(values["max-samples"]), budget_s=float(values["budget"]),
            min_time_s=float(values["min-time"]), precision=float(values["precision"]),
            statistic=str(values["statistic"]), flush_l2=bool(values["flush-l2"]),
            reject_preempted=values["preempted"] == "reject")
    except ValueError as exc:
        raise pytest.UsageError(f"npuperf sampling options: {exc}") from None
    try:
        timeout = case_timeout(float(values["case-timeout"]))
    except ValueError as exc:
        raise pytest.UsageError(f"npuperf_case_timeout: {exc}") from None
    threads = values["threads"]
    if threads is not None and int(threads) < 1:  # from the ini file (argparse checks flags)
        raise pytest.UsageError(f"npuperf_threads: {threads} is not a count of at least 1")
    every = int(values["verify-every"])
    if every < 0:
        raise pytest.UsageError(f"npuperf_verify_every: expected a number >= 0, got {every}")
    device_name = values["device-name"]
    if device_name:
        try:  # it becomes a directory name under --npuperf-out
            device_name = check_device(str(device_name))
        except NpuperfError as exc:
            raise pytest.UsageError(f"npuperf_device_name: {exc}") from None
    threshold = float(values["threshold"])
    if not threshold >= 0 or threshold == float("inf"):
        raise pytest.UsageError(f"npuperf_threshold: expected a fraction >= 0 (0.05 is "
                                f"5 %), got {threshold}")
    table = parse_table(values["table"])
    progress = parse_progress(values["progress"])
    history = values["history"]
    history_path = (None if str(history).strip().lower() == "none" else Path(str(history))) \
        if history else out / "history.sqlite"
    return Settings(db=db, device=str(values["device"]), device_name=device_name,
                    update_mode=str(values["update-mode"]),
                    prune_empty=bool(values["prune-empty-duration-rows"]),
                    dry_run=bool(values["dry-run"]), out=out, method=str(values["method"]),
                    policy=policy, case_timeout_s=timeout,
                    grid=config.getoption("npuperf_grid") or config.getini("npuperf_grid") or None,
                    threads=None if threads is None else int(threads),
                    verify=every if values["verify"] or every else None,
                    history=history_path, baseline=str(values["baseline"]).strip() or None
                    if values["baseline"] else None, regression_threshold=threshold,
                    shard=parse_shard(values["shard"]) if values["shard"] else None,
                    figures=not values["no-figures"],
                    profiler=str(values["profiler"]), keep_prof=bool(values["keep-prof"]),
                    model_profile=values["model-profile"] == "auto", embedded=not values["db"],
                    cache=str(values["cache"]), impl=_impl(values["impl"]),
                    resume=str(values["resume"]).strip() or None if values["resume"] else None,
                    strict_stack=bool(values["strict-stack"]), table=table, progress=progress)


def parse_table(text: object) -> int | None:
    """`all` -> None (every case), `none` -> 0, `N` -> the N worst and N best."""
    value = str(text).strip().lower()
    if value == "all":
        return None
    if value in ("none", "0"):
        return 0
    if value.isascii() and value.isdigit():
        return int(value)
    raise pytest.UsageError(f"npuperf_table: expected all, none or a number of cases, got "
                            f"{text!r}")


def parse_progress(text: object) -> float | None:
    """`auto` -> None, `none` -> 0, SECONDS -> seconds between lines (> 0)."""
    value = str(text).strip().lower()
    if value == "auto":
        return None
    if value in ("none", "off", "0"):
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise pytest.UsageError(f"npuperf_progress: expected auto, none or a number of seconds, "
                                f"got {text!r}")
    return seconds


def _impl(value: object) -> str:
    from ..kernels.implementation_options import MODES, known_names

    name = str(value).strip().lower()
    if name not in (*MODES, *known_names()):
        raise pytest.UsageError(f"npuperf_impl: {value!r} is not one of "
                                f"{', '.join((*MODES, *known_names()))}")
    return name


def parse_shard(text: object) -> tuple[int, int]:
    """`I/N` with 1 <= I <= N, as (I, N); a UsageError otherwise."""
    parts = str(text).strip().split("/")
    if len(parts) == 2 and all(p.strip().isascii() and p.strip().isdigit() for p in parts):
        index, count = int(parts[0]), int(parts[1])
        if 1 <= index <= count:
            return index, count
    raise pytest.UsageError(f"npuperf_shard: expected I/N with 1 <= I <= N (e.g. 2/4), got "
                            f"{text!r}")
