"""Every third-party package that `core` or `app` imports is a declared runtime dependency: a test
environment has many more (diffusers brings Pillow), an artist's install and the frozen app only
what pyproject.toml names."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: import name -> distribution name, where they differ
DISTRIBUTION = {
    "PIL": "pillow",
    "PySide6": "PySide6-Essentials",
    "yaml": "pyyaml",
    "pynvml": "nvidia-ml-py",
    "cv2": "opencv-python-headless",
}


#: optional extras: import name -> (extra, the only module that may import it)
OPTIONAL = {"ray": ("cluster", ROOT / "core" / "queue" / "ray_pool.py")}


def _imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _imported() -> set[str]:
    names: set[str] = set()
    for package in ("core", "app"):
        for path in (ROOT / package).rglob("*.py"):
            names |= _imports_of(path)
    return names - set(sys.stdlib_module_names) - {"core", "app", "__future__"} - set(OPTIONAL)


def test_ray_is_an_optional_extra_that_only_the_ray_executor_imports() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name, (extra, allowed) in OPTIONAL.items():
        assert any(d.lower().startswith(name) for d in extras[extra]), f"{name} is not in the {extra} extra"
        users = [
            p for package in ("core", "app") for p in (ROOT / package).rglob("*.py") if name in _imports_of(p)
        ]
        assert users == [allowed], f"{name} is imported outside {allowed.name}: {users}"


def test_every_imported_package_is_a_declared_dependency() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    declared = {
        d.split(";")[0].split(">")[0].split("=")[0].split("!")[0].split("<")[0].strip().lower() for d in deps
    }
    missing = sorted(
        name for name in _imported() if DISTRIBUTION.get(name, name).lower().replace("_", "-") not in declared
    )
    # open_clip is installed --no-deps for its vocabulary file, never imported (core/text/vocab.py);
    # spandrel is installed --no-deps (scripts/test, packaging/build.py): it names torchvision
    assert [m for m in missing if m != "spandrel"] == [], (
        f"imported but not declared in pyproject.toml: {missing}"
    )
