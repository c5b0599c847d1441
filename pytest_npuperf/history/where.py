"""Where the run history is when a command is not told: found the way pytest finds its rootdir,
so that `npuperf history` in a subdirectory (or anywhere below the project) reads the history
`pytest bench` wrote.

pytest's rootdir is the first directory, from the current one upwards, holding `pytest.ini`,
`.pytest.ini`, a `pyproject.toml` with `[tool.pytest.ini_options]`, a `tox.ini` with
`[pytest]` or a `setup.cfg` with `[tool:pytest]`. A session records its runs in
`npuperf_history` (ini) or `<npuperf_out>/history.sqlite`, both relative to the rootdir,
`npuperf-out/history.sqlite` by default. Without a configuration file (pytest then takes the
current directory), the nearest `npuperf-out/history.sqlite` upwards is taken.
"""

from __future__ import annotations

import configparser
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_OUT = "npuperf-out"
HISTORY_FILE = "history.sqlite"
_INI_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
_SECTIONS = {"pytest.ini": "pytest", ".pytest.ini": "pytest", "tox.ini": "pytest",
             "setup.cfg": "tool:pytest"}


@dataclass(frozen=True)
class Found:
    path: Path
    how: str  # how it was found, for messages

    def describe(self) -> str:
        return f"{self.path} ({self.how})"


def _pyproject_options(path: Path) -> dict[str, str] | None:
    """`[tool.pytest.ini_options]` of a pyproject.toml (None: it has none)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        import tomllib
    except ImportError:  # Python 3.10: the two keys read from the section's plain lines
        match = re.search(r"^\[tool\.pytest\.ini_options\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
        if match is None:
            return None
        return {k: v for k, v in re.findall(r'^\s*(npuperf_\w+)\s*=\s*"([^"]*)"', match.group(1),
                                             re.M)}
    try:
        options = tomllib.loads(text).get("tool", {}).get("pytest", {}).get("ini_options")
    except tomllib.TOMLDecodeError:
        return None
    return {str(k): str(v) for k, v in options.items()} if isinstance(options, dict) else None


def _ini_options(path: Path) -> dict[str, str] | None:
    """The pytest options of a configuration file (None: not a pytest configuration)."""
    if path.name == "pyproject.toml":
        return _pyproject_options(path)
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return None
    section = _SECTIONS[path.name]
    if not parser.has_section(section):
        return {} if path.name in ("pytest.ini", ".pytest.ini") else None
    return dict(parser.items(section))


def rootdir(start: Path) -> tuple[Path, Path, dict[str, str]] | None:
    """(rootdir, its configuration file, the file's pytest options), as pytest finds them."""
    for directory in (start, *start.parents):
        for name in _INI_FILES:
            candidate = directory / name
            if candidate.is_file():
                options = _ini_options(candidate)
                if options is not None:
                    return directory, candidate, options
    return None


def find_history(start: Path | None = None) -> Found:
    """The history file a pytest session started in `start` (the current directory) records
    its runs in; it may not exist yet."""
    start = (start or Path.cwd()).resolve()
    found = rootdir(start)
    if found is not None:
        root, config, options = found
        if options.get("npuperf_history"):
            return Found(root / options["npuperf_history"],
                         f"npuperf_history in {config}")
        out = options.get("npuperf_out") or DEFAULT_OUT
        how = f"npuperf_out in {config}" if options.get("npuperf_out") else \
            f"the rootdir of {config}"
        return Found(root / out / HISTORY_FILE, how)
    for directory in (start, *start.parents):
        candidate = directory / DEFAULT_OUT / HISTORY_FILE
        if candidate.is_file():
            return Found(candidate, "the nearest npuperf-out above the current directory")
    return Found(start / DEFAULT_OUT / HISTORY_FILE, "the current directory: no pytest "
                                                     "configuration file above it")
