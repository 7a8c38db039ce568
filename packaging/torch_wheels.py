"""Fail early when the torch wheel a build pins is not on the index it names.

A CI job's first step, before anything is installed (standard library only)::

    python packaging/torch_wheels.py --index-url https://download.pytorch.org/whl/cu130 \\
        --platform win_amd64

It reads the index's page for torch (PEP 503 "simple" HTML, as pip does), looks for the wheel of
the torch version ``constraints.txt`` pins (``--version`` overrides) for this Python (``--python``,
default the running one) and platform, and prints the file it found. Nothing is downloaded but the
listing. Exit status: 0 found; 1 the index answers but has no such wheel (the message names the
versions it does have for this Python and platform); 2 the index cannot be reached.

The CUDA builds each torch release publishes (PyTorch's RELEASE.md, "Release Compatibility
Matrix") are recorded in :data:`PUBLISHED_CUDA`; ``tests/packaging`` checks that every index a
workflow names is one of them, so a pin moved to a release without that CUDA build fails a test
before it fails a two-hour CI job.
"""

from __future__ import annotations

import argparse
import html.parser
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: torch minor release -> the CUDA builds on download.pytorch.org/whl/cuXYZ (stable and
#: experimental), from PyTorch's release matrix. 2.12 and 2.13 publish no cu128.
PUBLISHED_CUDA: dict[str, tuple[str, ...]] = {
    "2.11": ("cu126", "cu128", "cu130"),
    "2.12": ("cu126", "cu130", "cu132"),
    "2.13": ("cu126", "cu130", "cu132"),
}

#: the platform tags a build host's wheel carries (the wheel's last tag must match one)
PLATFORMS = {
    "linux_x86_64": re.compile(r"^(manylinux\d*_\d+_\d+|manylinux\d+)_x86_64$|^linux_x86_64$"),
    "win_amd64": re.compile(r"^win_amd64$"),
    "macosx_arm64": re.compile(r"^macosx_\d+_\d+_arm64$"),
}


def pinned_torch(constraints: Path = ROOT / "constraints.txt") -> str:
    for line in constraints.read_text().splitlines():
        if match := re.fullmatch(r"\s*torch==([\w.+!-]+)\s*(#.*)?", line):
            return match[1]
    raise SystemExit(f"torch_wheels: {constraints} pins no torch==VERSION")


def index_flavour(index_url: str) -> str | None:
    """``cu130`` for ``https://download.pytorch.org/whl/cu130``; None for PyPI and ``.../cpu``."""
    match = re.search(r"/whl/(cu\d+)/?$", index_url)
    return match[1] if match else None


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.files: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            path = urllib.parse.urlsplit(href).path
            self.files.append(urllib.parse.unquote(path.rsplit("/", 1)[-1]))


def listed_wheels(page: str) -> list[str]:
    """The wheel file names a PEP 503 project page links to."""
    parser = _Links()
    parser.feed(page)
    return [name for name in parser.files if name.endswith(".whl")]


def wheel_fits(name: str, version: str, python: str, platform: str) -> bool:
    """Whether ``torch-<version>[+local]-<cpXY>-<cpXY>-<platform>.whl`` is this build's wheel.

    ``version`` may carry a local tag (``2.13.0+cu130``: that one only) or not (``2.13.0``: the
    index's build of that version, whatever its local tag)."""
    parts = name.removesuffix(".whl").split("-")
    if len(parts) != 5 or parts[0] != "torch":
        return False
    _, wheel_version, py_tag, _abi, plat = parts
    same = wheel_version == version if "+" in version else wheel_version.split("+")[0] == version
    return same and _for(python, platform, py_tag, plat)


def _for(python: str, platform: str, py_tag: str, plat: str) -> bool:
    cp = "cp" + python.replace(".", "")
    return cp in py_tag.split(".") and any(PLATFORMS[platform].match(p) for p in plat.split("."))


def fetch_listing(index_url: str, timeout: float = 30.0) -> str:
    url = index_url.rstrip("/") + "/torch/"
    request = urllib.request.Request(url, headers={"Accept": "text/html"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return str(response.read().decode("utf-8", "replace"))


def check(index_url: str, version: str, python: str, platform: str) -> tuple[int, str]:
    """(exit status, message) for the wheel this build would install."""
    minor = ".".join(version.split("+")[0].split(".")[:2])
    flavour = index_flavour(index_url)
    published = PUBLISHED_CUDA.get(minor)
    if flavour and published is not None and flavour not in published:
        return 1, (
            f"torch {minor} publishes no {flavour} wheels (PyTorch's release matrix: "
            f"{', '.join(published)}); choose one of those indexes."
        )
    try:
        page = fetch_listing(index_url)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        return 2, f"cannot read {index_url.rstrip('/')}/torch/: {exc}"
    wheels = listed_wheels(page)
    found = [w for w in wheels if wheel_fits(w, version, python, platform)]
    if found:
        return 0, f"{index_url}: {found[0]}"
    parts = [w.removesuffix(".whl").split("-") for w in wheels]
    others = sorted(
        {p[1] for p in parts if len(p) == 5 and _for(python, platform, p[2], p[4])},
        key=lambda v: [int(n) for n in re.findall(r"\d+", v)],
    )
    return 1, (
        f"{index_url} has no torch {version} wheel for Python {python} on {platform}. "
        f"It has, for that Python and platform: {', '.join(others[-8:]) or 'none'}. "
        "Change the index (the workflow's torch index) or the pin (constraints.txt)."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--index-url", required=True, help="a PEP 503 index (…/whl/cu130, PyPI's /simple)")
    parser.add_argument("--platform", required=True, choices=sorted(PLATFORMS))
    parser.add_argument("--version", help="torch version (default: constraints.txt's pin)")
    parser.add_argument("--python", default=f"{sys.version_info.major}.{sys.version_info.minor}")
    args = parser.parse_args(argv)
    code, message = check(args.index_url, args.version or pinned_torch(), args.python, args.platform)
    prefix = "torch_wheels: MISSING: " if code == 1 else "torch_wheels: "
    print(prefix + message, file=sys.stdout if code == 0 else sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
