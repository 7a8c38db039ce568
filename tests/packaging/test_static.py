"""The packaging files are well formed and agree with each other (fast; builds nothing).

The frozen app itself is smoke-run by ``test_frozen.py`` when ``LOADOUT_FROZEN_APP`` names one.
"""

from __future__ import annotations

import ast
import configparser
import fnmatch
import os
import plistlib
import re
import shutil
import struct
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
WORKFLOWS = ROOT / ".github" / "workflows"
SHELL_SCRIPTS = (
    "packaging/smoke.sh",
    "packaging/measure_startup.sh",
    "packaging/macos/make_dmg.sh",
    "packaging/linux/install-desktop-entry.sh",
    "packaging/linux/uninstall-desktop-entry.sh",
)


# --- resources ship inside the package ------------------------------------------------------------
def test_theme_finds_its_resources_inside_the_app_package() -> None:
    import app
    from app.gui import theme

    assert Path(app.__file__).resolve().parent / "resources" == theme.RESOURCES
    for name in ("dark.qss", "light.qss", "loadout.svg"):
        assert (theme.RESOURCES / name).is_file(), name
    icons = sorted(p.name for p in (theme.RESOURCES / "icons").glob("*.svg"))
    assert len(icons) >= 10 and "checkpoint.svg" in icons and "unknown.svg" in icons
    assert not (ROOT / "resources").exists(), "the old top-level resources/ folder is back"


def test_stylesheet_icons_exist() -> None:
    from app.gui import theme

    for qss in ("dark.qss", "light.qss"):
        for name in re.findall(r"\{icons\}/([\w.-]+)", (theme.RESOURCES / qss).read_text()):
            assert (theme.RESOURCES / "icons" / name).is_file(), f"{qss} names a missing icon {name}"


def test_package_data_covers_every_resource_file() -> None:
    """What pyproject's package-data matches is what the wheel (and so the frozen app) ships."""
    with open(ROOT / "pyproject.toml", "rb") as fh:
        patterns = tomllib.load(fh)["tool"]["setuptools"]["package-data"]["*"]
    files = [
        p for p in (ROOT / "app" / "resources").rglob("*") if p.is_file() and "__pycache__" not in p.parts
    ]
    assert files
    for path in files:
        assert any(fnmatch.fnmatch(path.name, pat) for pat in patterns), f"{path} is not package data"


# --- PyInstaller spec ---------------------------------------------------------------------------------
def _spec() -> ast.Module:
    return ast.parse((PACKAGING / "loadout.spec").read_text(), "loadout.spec")


def _called(tree: ast.Module) -> set[str]:
    return {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def test_spec_parses_and_builds_one_folder_for_every_os() -> None:
    tree = _spec()
    assert {"Analysis", "PYZ", "EXE", "COLLECT", "BUNDLE", "collect_data_files", "copy_metadata"} <= _called(
        tree
    )
    text = (PACKAGING / "loadout.spec").read_text()
    assert 'collect_data_files("app"' in text and "resources/" in text
    assert '"pynvml"' in text  # imported by name at run time
    assert "loadout_main.py" in text and (PACKAGING / "loadout_main.py").is_file()
    for key in ("CFBundleShortVersionString", "NSHighResolutionCapable", "LSMinimumSystemVersion"):
        assert key in text, key
    assert 'bundle_identifier="org.loadout.Loadout"' in text
    for script in ("loadout_main.py", "build.py", "render_icons.py"):
        compile((PACKAGING / script).read_text(), script, "exec")


def _keep():  # type: ignore[no-untyped-def]
    """The spec's file filter, run without PyInstaller: its constants and ``keep`` alone."""
    tree = _spec()
    wanted = {"DROP_DIRS", "DROP_SUFFIXES", "keep"}
    body = [
        node
        for node in tree.body
        if (isinstance(node, ast.FunctionDef) and node.name in wanted)
        or (isinstance(node, ast.Assign) and {getattr(t, "id", "") for t in node.targets} & wanted)
    ]
    namespace: dict[str, object] = {}
    exec(compile(ast.Module(body=body, type_ignores=[]), "loadout.spec", "exec"), namespace)
    return namespace["keep"]


@pytest.mark.parametrize(
    ("dest", "kept"),
    [
        ("torch/lib/libtorch_cpu.so", True),
        ("torch/lib/torch_cuda.dll", True),
        ("torch/bin/torch_shm_manager", True),  # `import torch` checks that it exists
        ("torch/bin/protoc", False),
        ("torch/bin/TCPStoreTest", False),
        ("torch/include/ATen/ATen.h", False),
        ("torch/test/x.py", False),
        ("torch/lib/dnnl.lib", False),
        ("torch/lib/libsleef.a", False),
        ("app/resources/dark.qss", True),
        ("app/resources/icons/lora.svg", True),
        ("PySide6/Qt/plugins/platforms/libqxcb.so", True),
        ("PySide6/Qt/plugins/platforms/libqwayland.so", True),
        ("PySide6/Qt/plugins/platforms/libqoffscreen.so", True),
        ("PySide6/plugins/platforms/qwindows.dll", True),
        ("PySide6/Qt/plugins/platforms/libqeglfs.so", False),
        ("PySide6/Qt/plugins/imageformats/libqsvg.so", True),
        ("PySide6/Qt/plugins/platformthemes/libqgtk3.so", False),  # loads the host's GTK3 stack
        ("PySide6/Qt/plugins/platformthemes/libqxdgdesktopportal.so", True),
        ("PySide6/Qt/translations/qtbase_de.qm", False),
        ("PySide6\\translations\\qtbase_de.qm", False),
    ],
)
def test_spec_drops_only_what_nothing_reads(dest: str, kept: bool) -> None:
    assert _keep()((dest, "/src", "DATA")) is kept


def test_entitlements_plist_loads() -> None:
    data = plistlib.loads((PACKAGING / "macos" / "entitlements.plist").read_bytes())
    assert data["com.apple.security.cs.allow-unsigned-executable-memory"] is True


# --- Inno Setup ----------------------------------------------------------------------------------------
def _iss() -> tuple[dict[str, str], dict[str, list[str]]]:
    """(#define name -> value, section -> its lines) of the Inno Setup script."""
    defines: dict[str, str] = {}
    sections: dict[str, list[str]] = {}
    current = None
    for raw in (PACKAGING / "windows" / "loadout.iss").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(";"):
            continue
        if match := re.match(r'#define\s+(\w+)\s+"([^"]*)"', line):
            defines[match[1]] = match[2]
        elif line.startswith("#"):
            continue
        elif match := re.fullmatch(r"\[(\w+)\]", line):
            current = match[1]
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return defines, sections


def test_inno_setup_script_installs_per_user_with_start_menu_entry_and_uninstaller() -> None:
    defines, sections = _iss()
    assert {"Setup", "Files", "Icons"} <= set(sections)
    setup = dict(line.split("=", 1) for line in sections["Setup"])
    assert setup["PrivilegesRequired"] == "lowest"
    assert (
        setup["DefaultDirName"].replace("{#AppName}", defines["AppName"])
        == r"{localappdata}\Programs\Loadout"
    )
    assert setup.get("Uninstallable", "yes") == "yes"
    assert "{app}" in setup["UninstallDisplayIcon"]
    assert any(r"dist\Loadout\*" in line and "recursesubdirs" in line for line in sections["Files"])
    assert any(line.startswith('Name: "{userprograms}') for line in sections["Icons"])
    assert defines["AppExe"] == "Loadout.exe"


# --- Linux desktop entry --------------------------------------------------------------------------------
def test_desktop_entry_has_what_menus_need() -> None:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(PACKAGING / "linux" / "loadout.desktop", encoding="utf-8")
    entry = parser["Desktop Entry"]
    assert entry["Type"] == "Application"
    assert entry["Name"] == "Loadout"
    assert entry["Exec"] and entry["Icon"] == "loadout"
    assert entry["Categories"].endswith(";") and "Graphics" in entry["Categories"].split(";")
    assert entry["Terminal"] == "false"


@pytest.mark.skipif(not shutil.which("desktop-file-validate"), reason="desktop-file-validate not installed")
def test_desktop_entry_validates() -> None:
    run = subprocess.run(
        ["desktop-file-validate", str(PACKAGING / "linux" / "loadout.desktop")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0 and not run.stdout.strip(), run.stdout + run.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell scripts")
def test_install_and_uninstall_desktop_entry(tmp_path: Path) -> None:
    """The tarball's scripts on a fake unpacked folder (with a space in its path) and an empty home."""
    folder = tmp_path / "unpacked here" / "Loadout-0"
    folder.mkdir(parents=True)
    for name in ("loadout.desktop", "install-desktop-entry.sh", "uninstall-desktop-entry.sh"):
        shutil.copy2(PACKAGING / "linux" / name, folder / name)
    (folder / "loadout.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    app = folder / "Loadout"
    app.write_text("#!/bin/sh\nexit 0\n")
    app.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    subprocess.run([str(folder / "install-desktop-entry.sh")], env=env, check=True, capture_output=True)
    desktop = home / ".local/share/applications/loadout.desktop"
    lines = desktop.read_text().splitlines()
    assert f'Exec="{app}"' in lines and f"TryExec={app}" in lines
    assert (home / ".local/share/icons/hicolor/256x256/apps/loadout.png").is_file()
    assert (home / ".local/bin/loadout").resolve() == app.resolve()

    own_models = home / ".local/share/Loadout/models"
    own_models.mkdir(parents=True)
    (own_models / "mine.safetensors").write_bytes(b"x")
    for made in (".config/Loadout", ".cache/Loadout", ".local/share/Loadout/demo-library"):
        (home / made).mkdir(parents=True)
    queue = home / ".local/share/Loadout/Loadout/queue.sqlite"  # Qt's AppDataLocation (org/app)
    queue.parent.mkdir(parents=True)
    queue.write_bytes(b"SQLite format 3\0")
    queue.with_name("queue.sqlite-wal").write_bytes(b"")
    picture = home / "Pictures/Loadout/2026-11-27/00000-5.png"
    picture.parent.mkdir(parents=True)
    picture.write_bytes(b"\x89PNG")
    uninstall = str(folder / "uninstall-desktop-entry.sh")
    subprocess.run([uninstall, "--purge"], env=env, check=True, capture_output=True)
    assert not desktop.exists() and not (home / ".local/bin/loadout").exists()
    assert not (home / ".config/Loadout").exists() and not (home / ".cache/Loadout").exists()
    assert not (home / ".local/share/Loadout/demo-library").exists()
    assert not (home / ".local/share/Loadout/Loadout").exists(), "the queue file stayed"
    assert (own_models / "mine.safetensors").is_file(), "--purge must never delete the user's models"
    assert picture.is_file(), "--purge alone must never delete pictures"
    picture.unlink()
    subprocess.run([uninstall, "--purge"], env=env, check=True, capture_output=True)
    assert not (home / "Pictures/Loadout").exists(), "an empty pictures folder Loadout made stays"
    picture.parent.mkdir(parents=True)
    picture.write_bytes(b"\x89PNG")
    subprocess.run([uninstall, "--purge", "--purge-pictures"], env=env, check=True, capture_output=True)
    assert not (home / "Pictures/Loadout").exists() and (home / "Pictures").is_dir()


@pytest.mark.skipif(not shutil.which("bash"), reason="bash not installed")
@pytest.mark.parametrize("script", SHELL_SCRIPTS)
def test_shell_scripts_parse_and_are_executable(script: str) -> None:
    path = ROOT / script
    run = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    if sys.platform != "win32":
        assert os.access(path, os.X_OK), f"{script} is not executable"


# --- icons --------------------------------------------------------------------------------------------------
def test_icons_render_for_every_os(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            str(PACKAGING / "render_icons.py"),
            str(ROOT / "app/resources/loadout.svg"),
            str(tmp_path),
        ],
        env=dict(os.environ, QT_QPA_PLATFORM="offscreen"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    png = (tmp_path / "loadout-256.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (256, 256)
    ico = (tmp_path / "loadout.ico").read_bytes()
    reserved, kind, count = struct.unpack("<HHH", ico[:6])
    assert (reserved, kind) == (0, 1) and count >= 5
    icns = (tmp_path / "loadout.icns").read_bytes()
    assert icns[:4] == b"icns" and struct.unpack(">I", icns[4:8])[0] == len(icns)


# --- GitHub Actions ----------------------------------------------------------------------------------------
def _steps(name: str) -> list[dict[str, object]]:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    assert data["name"] == name.removesuffix(".yml")
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` as true
    assert "workflow_dispatch" in triggers
    return [step for job in data["jobs"].values() for step in job["steps"]]


def _runs(steps: list[dict[str, object]]) -> str:
    return "\n".join(str(step.get("run", "")) for step in steps)


@pytest.mark.parametrize("name", ["package-linux.yml", "package-windows.yml", "package-macos.yml"])
def test_workflow_builds_smoke_runs_and_uploads(name: str) -> None:
    steps = _steps(name)
    runs = _runs(steps)
    assert "python packaging/build.py" in runs
    assert "packaging/smoke.sh" in runs
    uses = [str(step.get("uses", "")) for step in steps]
    assert any(u.startswith("actions/upload-artifact@") for u in uses)
    assert any(u.startswith("actions/setup-python@") for u in uses)


def test_windows_workflow_bundles_cuda_torch_and_builds_the_installer() -> None:
    text = (WORKFLOWS / "package-windows.yml").read_text()
    assert "download.pytorch.org/whl/cu1" in text
    runs = _runs(_steps("package-windows.yml"))
    assert "ISCC.exe" in runs and r"packaging\windows\loadout.iss" in runs


def test_macos_workflow_makes_the_disk_image() -> None:
    assert "packaging/macos/make_dmg.sh" in _runs(_steps("package-macos.yml"))


def test_build_and_dist_are_ignored() -> None:
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "build/" in ignored and "dist/" in ignored
