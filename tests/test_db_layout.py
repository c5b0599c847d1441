"""Database layout, version directories and file names (docs/format.md §1)."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_npuperf.db import layout
from pytest_npuperf.db.errors import VersionError
from pytest_npuperf.db.layout import (
    DEFAULT_DEVICE,
    KNOWN_DEVICES,
    check_device,
    database_dir,
    detect_cann_version,
    device_of,
    hccl_dir,
    is_version_dir_name,
    kernel_file_name,
    normalize_kernel_type,
    normalize_version,
    parse_version_dir,
    resolve_database_dir,
    resolve_version_dir,
    version_dir_name,
)
from pytest_npuperf.db.table import write_text

DIR = "vllm0.18.0_torch2.9.0_cann8.5"


def test_known_devices_and_default() -> None:
    assert DEFAULT_DEVICE == "ATLAS_800_A3_752T_128G_DIE"
    assert set(KNOWN_DEVICES) == {
        "ATLAS_800_A3_752T_128G_DIE", "ATLAS_800_A3_560T_128G_DIE", "ATLAS_800_A2_376T_64G",
        "ATLAS_800_A2_313T_64G", "ATLAS_800_A2_280T_64G", "ATLAS_800_A2_280T_64G_PCIE",
        "ATLAS_800_A2_280T_32G_PCIE"}


@pytest.mark.parametrize("value, kind, expected", [
    ("0.18.0", "vllm", "0.18.0"), ("v0.18.0", "vllm", "0.18.0"), ("vllm0.18.0", "vllm", "0.18.0"),
    ("V0.18.0", "vllm", "0.18.0"), ("vllm-ascend0.18.0", "vllm", "0.18.0"),
    ("0.18.0rc1", "vllm", "0.18.0rc1"),
    ("2.9.0", "torch", "2.9.0"), ("torch2.9.0", "torch", "2.9.0"), ("v2.9.0", "torch", "2.9.0"),
    ("2.9.0+cpu", "torch", "2.9.0"), ("torch2.9.0+cu121", "torch", "2.9.0"),
    ("8.5", "cann", "8.5"), ("cann8.5", "cann", "8.5"), ("v8.5", "cann", "8.5"),
    ("8.3.RC2", "cann", "8.3.RC2"), (" 8.5 ", "cann", "8.5"),
])
def test_normalize_version(value: str, kind: str, expected: str) -> None:
    assert normalize_version(value, kind) == expected


@pytest.mark.parametrize("value, kind", [
    ("", "vllm"), ("0.18 .0", "vllm"), ("../x", "vllm"), ("0..18", "torch"), ("a/b", "cann"),
    ("8.5;rm", "cann"), ("8.5\x00", "cann"), (".8.5", "cann"), ("8.5.", "cann"),
    ("2,9", "torch"),
])
def test_invalid_versions_are_rejected_with_the_flag_to_use(value: str, kind: str) -> None:
    with pytest.raises(VersionError) as info:
        normalize_version(value, kind)
    assert f"--{kind}-version" in str(info.value)


def test_version_dir_name_normalises_each_component() -> None:
    assert version_dir_name("v0.18.0", "torch2.9.0+cpu", "cann8.5") == DIR
    assert version_dir_name("0.18.0", "2.9.0", "8.5") == DIR


def test_full_dir_name_passed_as_vllm_version_is_kept() -> None:
    assert version_dir_name(DIR, "ignored", "ignored") == DIR
    assert resolve_version_dir(DIR, None, None, detect=False) == DIR


def test_invalid_component_in_dir_name_is_rejected() -> None:
    with pytest.raises(VersionError, match="--torch-version"):
        version_dir_name("0.18.0", "2.9/../..", "8.5")


def test_version_dir_parse_round_trip() -> None:
    assert is_version_dir_name(DIR)
    versions = parse_version_dir(DIR)
    assert (versions.vllm, versions.torch, versions.cann) == ("0.18.0", "2.9.0", "8.5")
    assert versions.dir_name == DIR
    for bad in ("vllm0.18.0_torch2.9.0", "0.18.0_2.9.0_8.5", "vllm_torch2.9_cann8.5",
                "vllm0.18.0_torch2.9.0_cann8.5/..", "vllm0.18.0_torch2 9_cann8.5"):
        assert not is_version_dir_name(bad)
        with pytest.raises(VersionError):
            parse_version_dir(bad)


# -- detection --------------------------------------------------------------------------------

def _fake_metadata(versions: dict[str, str]) -> types.SimpleNamespace:
    class PackageNotFoundError(Exception):
        pass

    def version(name: str) -> str:
        if name in versions:
            return versions[name]
        raise PackageNotFoundError(name)

    return types.SimpleNamespace(version=version, PackageNotFoundError=PackageNotFoundError)


@pytest.fixture
def no_default_cann(monkeypatch, tmp_path) -> None:
    """Detection must not see a real CANN install of the machine running the tests."""
    monkeypatch.setattr(layout, "_CANN_DEFAULT_HOME", tmp_path / "no-cann-here")
    for var in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_INSTALL_PATH"):
        monkeypatch.delenv(var, raising=False)


def _toolkit(tmp_path: Path, relative: str, text: str) -> Path:
    home = tmp_path / "Ascend" / "ascend-toolkit" / "latest"
    (home / relative).parent.mkdir(parents=True, exist_ok=True)
    (home / relative).write_text(text)
    return home


@pytest.mark.parametrize("relative, text, expected", [
    ("compiler/version.info", "Version=8.5.0\nversion_dir=8.5.0\n", "8.5"),
    ("runtime/version.info", "Version=8.3.RC2\n", "8.3"),
    ("aarch64-linux/ascend_toolkit_install.info",
     "package_name=Ascend-cann-toolkit\nversion=8.0.RC1\ninnerversion=V100R001C17\n", "8.0"),
])
def test_cann_version_is_read_from_the_toolkit(tmp_path, no_default_cann, relative, text,
                                               expected) -> None:
    home = _toolkit(tmp_path, relative, text)
    assert detect_cann_version({"ASCEND_TOOLKIT_HOME": str(home)}) == expected
    assert detect_cann_version({"ASCEND_HOME_PATH": str(home)}) == expected


def test_no_toolkit_means_no_cann_version(tmp_path, no_default_cann) -> None:
    assert detect_cann_version({}) is None
    assert detect_cann_version({"ASCEND_TOOLKIT_HOME": str(tmp_path / "missing")}) is None


def test_missing_versions_are_detected(monkeypatch, tmp_path, no_default_cann) -> None:
    monkeypatch.setattr(layout, "metadata", _fake_metadata(
        {"torch": "2.9.0+cpu", "vllm_ascend": "0.18.0", "torch_npu": "2.9.0"}))
    home = _toolkit(tmp_path, "compiler/version.info", "Version=8.5.0\n")
    env = {"ASCEND_TOOLKIT_HOME": str(home)}
    assert resolve_version_dir(env=env) == DIR
    # given versions win over detected ones
    assert resolve_version_dir("0.17.0", None, None, env=env) == "vllm0.17.0_torch2.9.0_cann8.5"


def test_error_names_each_missing_version_and_its_flag(monkeypatch, no_default_cann) -> None:
    monkeypatch.setattr(layout, "metadata", _fake_metadata({"torch": "2.9.0"}))
    with pytest.raises(VersionError) as info:
        resolve_version_dir(None, None, None, env={})
    message = str(info.value)
    assert "vllm" in message and "--vllm-version" in message
    assert "cann" in message.lower() and "--cann-version" in message
    assert "--torch-version" not in message       # torch was found
    assert "\n" not in message


def test_without_detection_missing_versions_are_errors() -> None:
    with pytest.raises(VersionError, match="--cann-version"):
        resolve_version_dir("0.18.0", "2.9.0", None, detect=False)


def test_resolve_database_dir(tmp_path, monkeypatch, no_default_cann) -> None:
    explicit = tmp_path / "anywhere"
    assert resolve_database_dir(explicit) == explicit
    assert resolve_database_dir(root=tmp_path, device="ATLAS_800_A2_376T_64G", vllm="0.18.0",
                                torch="2.9.0+cpu", cann="cann8.5") == \
        tmp_path / "ATLAS_800_A2_376T_64G" / "vllm_ascend" / DIR
    with pytest.raises(VersionError, match="--db"):
        resolve_database_dir(None)
    monkeypatch.setattr(layout, "metadata", _fake_metadata({}))
    with pytest.raises(VersionError, match="--torch-version"):
        resolve_database_dir(root=tmp_path, device="X", vllm="0.18.0", cann="8.5", env={})


@pytest.mark.parametrize("device", ["", "../evil", "a/b", "a\\b", ".hidden", "x y"])
def test_device_names_cannot_escape(device: str) -> None:
    with pytest.raises(VersionError, match="device"):
        check_device(device)
    with pytest.raises(VersionError):
        database_dir("/db", device, DIR)


def test_directories_of_a_device(tmp_path) -> None:
    path = database_dir(tmp_path, DEFAULT_DEVICE, DIR)
    assert path == tmp_path / DEFAULT_DEVICE / "vllm_ascend" / DIR
    assert device_of(path) == DEFAULT_DEVICE
    assert device_of(tmp_path / "somewhere") is None
    assert hccl_dir(tmp_path, DEFAULT_DEVICE, "cann8.5") == \
        tmp_path / DEFAULT_DEVICE / "hccl" / "v8.5"


@pytest.mark.parametrize("raw, expected", [
    ("split_qkv_rmsnorm_rope_kernel_0", "split_qkv_rmsnorm_rope_kernel"),
    ("muls_add_kernel_1", "muls_add_kernel"),
    ("muls_add_kernel_12", "muls_add_kernel"),
    ("MatMulV2", "MatMulV2"), ("Conv2D", "Conv2D"), ("Conv2D_1", "Conv2D_1"),
    ("FusedInferAttentionScore", "FusedInferAttentionScore"), (" Add ", "Add"),
])
def test_kernel_type_normalisation(raw: str, expected: str) -> None:
    assert normalize_kernel_type(raw) == expected


def test_ordinary_kernel_file_names_are_unchanged() -> None:
    assert kernel_file_name("MatMulV2") == "MatMulV2.csv"
    assert kernel_file_name("split_qkv_rmsnorm_rope_kernel") == "split_qkv_rmsnorm_rope_kernel.csv"


@pytest.mark.parametrize("name", [
    "..", ".", "../../etc/passwd", "/abs/path", "a/b", "a\\b", "..\\..\\x", "a..b", "....",
    "x\x00y", "x\ny", "x\ry", "\x1b[31m", "<>:\"|?*", "", " ", " .. ", "C:\\Windows",
    "a" * 500, "\u00e9" * 300, "\u5b57" * 100, "a" * 199 + "\u00e9",
], ids=lambda name: ascii(name)[:24])
def test_kernel_file_name_cannot_escape_the_directory(tmp_path, name: str) -> None:
    file_name = kernel_file_name(name)
    assert file_name.endswith(".csv")
    assert "/" not in file_name and "\\" not in file_name and ".." not in file_name
    assert not any(ord(ch) < 32 or ch in '<>:"|?*' for ch in file_name)
    target = tmp_path / file_name
    assert target.resolve().parent == tmp_path.resolve()
    write_text(target, "x\n")                       # a real file can be written there
    assert [p.name for p in tmp_path.iterdir()] == [file_name]


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=0, max_size=300))
def test_no_kernel_type_can_leave_the_directory(name: str) -> None:
    file_name = kernel_file_name(name)
    base = Path("/db/dir")
    assert (base / file_name).parent == base
    assert file_name not in (".csv", "..csv") and file_name.endswith(".csv")
    assert "/" not in file_name and "\\" not in file_name and ".." not in file_name
    assert not any(ord(ch) < 32 or ord(ch) == 127 for ch in file_name)
    assert len(file_name.encode("utf-8")) <= 255    # a file system can hold the name
