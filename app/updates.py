"""The opt-in update check: is a newer Loadout released? (No Qt here; the window runs it on a
background thread, app/gui/update_notice.py.)

The feed is the small ``latest.json`` each release carries (``packaging/release_assets.py``):
``{"version": "0.2.0", "tag": "v0.2.0", "url": <the release page>, "published": ...}``, read from
the URL the build bundled in ``app/release.json`` (``packaging/build.py --update-feed``) or from
``LOADOUT_UPDATE_FEED``. A build with neither offers no check. One GET with a short timeout, at
most :data:`MAX_BYTES` read, nothing sent but the request itself; any failure (no network, a
proxy page, a broken feed) is a quiet "could not check", never an error in the artist's face.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

FEED_ENV = "LOADOUT_UPDATE_FEED"
TIMEOUT_S = 5.0
MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class Release:
    version: str
    url: str


@dataclass(frozen=True)
class CheckResult:
    """``newer`` when a newer release exists; ``error`` says why the check could not be made."""

    current: str
    newer: Release | None = None
    error: str | None = None


def feed_url() -> str | None:
    """The release feed this build reads: ``LOADOUT_UPDATE_FEED``, else the bundled one."""
    if env := os.environ.get(FEED_ENV, "").strip():
        return env
    bundled = Path(__file__).with_name("release.json")
    try:
        feed = json.loads(bundled.read_text()).get("feed")
    except (OSError, ValueError, AttributeError):
        return None
    return str(feed) if isinstance(feed, str) and feed.startswith(("https://", "http://")) else None


def current_version() -> str:
    try:
        return metadata.version("loadout")
    except metadata.PackageNotFoundError:
        return "0"


def version_key(version: str) -> tuple[tuple[int, ...], int, tuple[int, ...]]:
    """Release order: ``0.10.0`` > ``0.9.1`` > ``0.9.1rc2`` > ``0.9.1rc1`` (a pre-release sorts
    before its release); a leading ``v`` and a local ``+tag`` are ignored."""
    match = re.fullmatch(
        r"v?(\d+(?:\.\d+)*)(?:[.-]?(a|b|rc|alpha|beta|dev)\.?(\d*))?(?:\+.*)?", version.strip()
    )
    if match is None:
        raise ValueError(f"not a release version: {version!r}")
    release = tuple(int(n) for n in match[1].split("."))
    release += (0,) * (4 - len(release))
    pre = (0, (int(match[3] or 0),)) if match[2] else (1, ())
    return release, pre[0], pre[1]  # type: ignore[return-value]


def check(url: str, current: str, timeout: float = TIMEOUT_S) -> CheckResult:
    """Read the feed at ``url`` and compare its version with ``current``; never raises."""
    request = urllib.request.Request(
        url, headers={"Accept": "application/json", "User-Agent": f"Loadout/{current} (update check)"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read(MAX_BYTES + 1)
        if len(body) > MAX_BYTES:
            return CheckResult(current, error="the release feed is larger than a feed can be")
        data = json.loads(body)
        version, page = str(data["version"]), str(data["url"])
        newer = version_key(version) > version_key(current)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        return CheckResult(current, error=f"could not reach the release feed ({exc})")
    except (ValueError, KeyError, TypeError) as exc:
        return CheckResult(current, error=f"the release feed is not readable ({exc})")
    if not page.startswith(("https://", "http://")):
        return CheckResult(current, error="the release feed names no web page")
    return CheckResult(current, newer=Release(version, page) if newer else None)
