"""Database layout (docs/format.md §1): devices, version directories, file names.

```
<root>/<DEVICE>/vllm_ascend/vllm<V>_torch<T>_cann<C>/<KernelType>.csv
<root>/<DEVICE>/hccl/v<CANN>/hcom_<op>_.csv
```
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .errors import UnsafeNameError, VersionError, clip

KNOWN_DEVICES: tuple[str, ...] = (
    "ATLAS_800_A3_752T_128G_DIE", "ATLAS_800_A3_560T_128G_DIE", "ATLAS_800_A2_376T_64G",
    "ATLAS_800_A2_313T_64G", "ATLAS_800_A2_280T_64G", "ATLAS_800_A2_280T_64G_PCIE",
    "ATLAS_800_A2_280T_32G_PCIE",
)
DEFAULT_DEVICE = KNOWN_DEVICES[0]
FRAMEWORK_DIR = "vllm_ascend"
HCCL_DIR = "hccl"
REPORTS_DIR = "reports"
PROFILES_DIR = "profiles"  # traces a database's profiling values were parsed from
OP_MAPPING_FILE = "op_mapping.yaml"

_VERSION_RE = re.compile(r"^[0-9A-Za-z]+([._+-][0-9A-Za-z]+)*$")
_VERSION_DIR_RE = re.compile(r"^vllm(?P<vllm>.+?)_torch(?P<torch>.+?)_cann(?P<cann>.+)$")
_PREFIXES = {"vllm": ("vllm-ascend", "vllm_ascend", "vllm", "v"), "torch": ("torch", "v"),
             "cann": ("cann", "v")}
_FLAG = {"vllm": "--vllm-version", "torch": "--torch-version", "cann": "--cann-version"}


@dataclass(frozen=True)
class StackVersions:
    vllm: str
    torch: str
    cann: str

    @property
    def dir_name(self) -> str:
        return f"vllm{self.vllm}_torch{self.torch}_cann{self.cann}"


def normalize_version(value: str, kind: str) -> str:
    """Strip a leading `vllm`/`v`/`torch`/`cann` and torch's local suffix; validate.

    `kind` is one of `vllm`, `torch`, `cann`.
    """
    text = str(value).strip()
    lowered = text.lower()
    for prefix in _PREFIXES[kind]:
        if lowered.startswith(prefix) and len(text) > len(prefix):
            text = text[len(prefix):].lstrip("-_")
            break
    if kind == "torch":
        text = text.split("+", 1)[0]
    if not _VERSION_RE.match(text):
        raise VersionError(
            f"invalid {kind} version {value!r}: expected something like 2.9.0 "
            f"(letters, digits and . _ + - between them); pass it with {_FLAG[kind]}")
    return text


def is_version_dir_name(name: str) -> bool:
    match = _VERSION_DIR_RE.match(name)
    return bool(match) and all(_VERSION_RE.match(v) for v in match.groupdict().values())


def parse_version_dir(name: str) -> StackVersions:
    match = _VERSION_DIR_RE.match(name)
    if not match or not is_version_dir_name(name):
        raise VersionError(f"{name!r} is not a version directory name "
                           f"(expected vllm<V>_torch<T>_cann<C>, e.g. vllm0.18.0_torch2.9.0_cann8.5)")
    return StackVersions(**match.groupdict())


def version_dir_name(vllm: str, torch: str, cann: str) -> str:
    """`vllm<V>_torch<T>_cann<C>`; a full directory name given as the vLLM version is kept."""
    if is_version_dir_name(str(vllm).strip()):
        return str(vllm).strip()
    return StackVersions(normalize_version(vllm, "vllm"), normalize_version(torch, "torch"),
                         normalize_version(cann, "cann")).dir_name


def _package_version(*names: str) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


_CANN_VERSION_FILES = ("*/ascend_toolkit_install.info", "ascend_toolkit_install.info",
                       "compiler/version.info", "runtime/version.info", "version.cfg")
_CANN_VERSION_RE = re.compile(r"(?:^|\n)\s*(?:version|Version|toolkit_installed_version)\s*=\s*"
                              r"\[?\s*(?:[A-Za-z_]+:)?\s*([0-9]+\.[0-9]+[0-9A-Za-z.\-]*)")
# Where CANN's set_env.sh points; the last one is CANN's documented default install prefix.
_CANN_HOME_VARS = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_INSTALL_PATH")
_CANN_DEFAULT_HOME = Path("/usr/local/Ascend/ascend-toolkit/latest")


def _short_cann(version: str) -> str:
    """`8.5.0` -> `8.5`: database directories name CANN by major.minor."""
    parts = version.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 and parts[1].isdigit() else version


def detect_cann_version(env: dict[str, str] | None = None) -> str | None:
    """CANN version from the toolkit the environment points at, as major.minor; None if none."""
    env = dict(os.environ) if env is None else env
    homes = [Path(env[v]) for v in _CANN_HOME_VARS if env.get(v)]
    homes.append(_CANN_DEFAULT_HOME)
    for home in homes:
        for pattern in _CANN_VERSION_FILES:
            for path in sorted(home.glob(pattern)) if home.is_dir() else ():
                try:
                    match = _CANN_VERSION_RE.search(path.read_text(errors="replace"))
                except OSError:
                    continue
                if match:
                    return _short_cann(match.group(1))
    return None


def detect_versions(env: dict[str, str] | None = None) -> dict[str, str | None]:
    """Installed software stack: torch, torch_npu, vllm-ascend, CANN (None where absent)."""
    return {
        "torch": _package_version("torch"),
        "torch_npu": _package_version("torch_npu", "torch-npu"),
        "vllm": _package_version("vllm_ascend", "vllm-ascend"),
        "cann": detect_cann_version(env),
    }


def resolve_version_dir(vllm: str | None = None, torch: str | None = None,
                        cann: str | None = None, *, detect: bool = True,
                        env: dict[str, str] | None = None) -> str:
    """The version directory name from given versions, detecting the missing ones."""
    if vllm and is_version_dir_name(vllm.strip()):
        return vllm.strip()
    given = {"vllm": vllm, "torch": torch, "cann": cann}
    missing = [k for k, v in given.items() if not v]
    if missing and detect:
        found = detect_versions(env)
        for kind in missing:
            given[kind] = found[kind]
    still = [k for k, v in given.items() if not v]
    if still:
        hints = {"vllm": "vllm-ascend is not installed", "torch": "torch is not installed",
                 "cann": "no CANN toolkit found (ASCEND_TOOLKIT_HOME / ASCEND_HOME_PATH unset)"}
        detail = "; ".join(f"{k}: {hints[k]}, pass {_FLAG[k]}" for k in still)
        raise VersionError(f"cannot determine the database version directory: {detail}")
    return version_dir_name(given["vllm"], given["torch"], given["cann"])  # type: ignore[arg-type]


_DEVICE_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_.\-]*$")
_MAX_COMPONENT = 200


def check_device(device: str) -> str:
    """A device name that is one safe path component (`../../X`, `a/b`, `.x` are refused)."""
    name = str(device).strip()
    if not name or len(name) > _MAX_COMPONENT or not _DEVICE_RE.match(name):
        raise VersionError(f"invalid device name {clip(device)}: letters, digits and _ . - "
                           f"(starting with a letter or digit); known Ascend devices: "
                           f"{', '.join(KNOWN_DEVICES)}")
    return name


def check_component(name: str, what: str) -> str:
    """A name that becomes one directory or file name under a database: never `.`, `..`, a
    path separator, a control character or an empty name."""
    text = str(name)
    if (not text or text in (".", "..") or len(text.encode("utf-8")) > 255
            or any(ch in text for ch in "/\\") or any(ord(ch) < 32 or ord(ch) == 127 for ch in text)):
        raise UnsafeNameError(f"invalid {what} {clip(name)}: it must be one plain directory or "
                              f"file name")
    return text


def database_dir(root: str | Path, device: str, version_dir: str) -> Path:
    """`<root>/<device>/vllm_ascend/<version_dir>`, every name checked (one place for all)."""
    return (Path(root) / check_device(device) / FRAMEWORK_DIR
            / check_component(version_dir, "version directory"))


def hccl_dir(root: str | Path, device: str, cann: str) -> Path:
    return Path(root) / check_device(device) / HCCL_DIR / f"v{normalize_version(cann, 'cann')}"


def resolve_database_dir(database_path: str | Path | None = None, *, root: str | Path = "data",
                         device: str | None = None, vllm: str | None = None,
                         torch: str | None = None, cann: str | None = None,
                         detect: bool = True, env: dict[str, str] | None = None) -> Path:
    """The version directory to read or write: an explicit path, else root/device/versions."""
    if database_path is not None:
        return Path(database_path)
    if not device:
        raise VersionError("no database given: pass --db DIR, or --device with "
                           "--vllm-version/--torch-version/--cann-version")
    return database_dir(root, device, resolve_version_dir(vllm, torch, cann, detect=detect, env=env))


def device_of(database_path: str | Path) -> str | None:
    """The device a version directory belongs to (`.../<DEVICE>/vllm_ascend/<VERSION>`)."""
    path = Path(database_path).resolve()
    if path.parent.name == FRAMEWORK_DIR:
        return path.parent.parent.name
    return None


_TRAILING_INSTANCE = re.compile(r"^(?P<base>.*[A-Za-z])_\d+$")


def normalize_kernel_type(name: str) -> str:
    """The profiler's `Type` without a launch-instance suffix: `muls_add_kernel_1` -> `muls_add_kernel`.

    Only snake_case names (Triton and custom kernels) carry such suffixes; CamelCase CANN
    types such as `Conv2D` are kept whole.
    """
    text = str(name).strip().strip('"').strip()
    match = _TRAILING_INSTANCE.match(text)
    if match and "_" in match.group("base") and match.group("base") == match.group("base").lower():
        return match.group("base")
    return text


_UNSAFE_CHARS = re.compile(r'[\x00-\x1f\x7f/\\<>:"|?*]')
_MAX_NAME = 200


def kernel_file_name(kernel_type: str) -> str:
    """`<KernelType>.csv`, sanitised so that no type name can leave the directory."""
    name = _UNSAFE_CHARS.sub("_", str(kernel_type)).replace("..", "_").strip(" .")
    if not name:
        name = "_"
    # File systems limit a name in bytes (255), not characters, and the temporary file of
    # an atomic write adds a few more: cut the UTF-8 form, never inside a character.
    encoded = name.encode("utf-8")
    if len(encoded) > _MAX_NAME:
        digest = hashlib.blake2s(encoded, digest_size=6).hexdigest()
        head = encoded[:_MAX_NAME - 13].decode("utf-8", errors="ignore")
        name = f"{head}_{digest}"
    return f"{name}.csv"


def kernel_type_of_file(path: str | Path) -> str:
    return Path(path).stem
