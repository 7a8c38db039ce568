"""Turn the packaging workflows' artifacts into a release's assets (release.yml's publish job).

    python3 packaging/release_assets.py ARTIFACTS_DIR OUT_DIR --tag v0.2.0 --repo OWNER/NAME

- every file found under ARTIFACTS_DIR goes to OUT_DIR; one larger than GitHub's per-asset limit
  (2 GiB; ``--limit`` for tests) is cut into ``NAME.part1``, ``NAME.part2`` ... each under it
  (the Linux CUDA tarballs: ``cat NAME.part* > NAME`` joins them); the Windows setups arrive
  already sliced by Inno Setup's disk spanning;
- ``SHA256SUMS`` lists every asset and every whole file that was cut (``sha256sum -c
  --ignore-missing SHA256SUMS`` checks what a user downloaded or joined);
- ``latest.json``, the feed the app's opt-in update check reads (app/updates.py):
  ``{"version", "tag", "url", "published"}``; the tag must name pyproject's version.

Standard library only; nothing is uploaded here (the workflow runs ``gh release``).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: GitHub's limit is 2 GiB per release asset; a little under it
LIMIT = 2 * 2**30 - 2**20
CHUNK = 8 * 2**20


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def split(path: Path, out: Path, limit: int) -> list[Path]:
    """``path`` cut into ``out/NAME.partN`` files of at most ``limit`` bytes each."""
    parts: list[Path] = []
    with open(path, "rb") as src:
        while True:
            part = out / f"{path.name}.part{len(parts) + 1}"
            written = 0
            with open(part, "wb") as dst:
                while written < limit and (block := src.read(min(CHUNK, limit - written))):
                    dst.write(block)
                    written += len(block)
            if written == 0:
                part.unlink()
                break
            parts.append(part)
    return parts


def project_version() -> str:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return str(tomllib.load(fh)["project"]["version"])


def prepare(artifacts: Path, out: Path, *, tag: str, repo: str, limit: int = LIMIT) -> list[Path]:
    version = tag.removeprefix("v")
    if version != project_version():
        raise SystemExit(
            f"release_assets: tag {tag} does not name pyproject.toml's version {project_version()}"
        )
    files = sorted(p for p in artifacts.rglob("*") if p.is_file())
    if not files:
        raise SystemExit(f"release_assets: no files under {artifacts}")
    out.mkdir(parents=True, exist_ok=True)
    assets: list[Path] = []
    sums: list[str] = []
    for path in files:
        if any(a.name == path.name for a in assets):
            raise SystemExit(f"release_assets: two artifacts are named {path.name}")
        if path.stat().st_size > limit:
            sums.append(f"{sha256(path)}  {path.name}")  # the whole file, as joined again
            assets += split(path, out, limit)
        else:
            assets.append(Path(shutil.copy2(path, out / path.name)))
    sums += [f"{sha256(a)}  {a.name}" for a in assets]
    (out / "SHA256SUMS").write_text("\n".join(sorted(sums, key=lambda s: s.split("  ", 1)[1])) + "\n")
    feed = {
        "version": version,
        "tag": tag,
        "url": f"https://github.com/{repo}/releases/tag/{tag}",
        "published": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    (out / "latest.json").write_text(json.dumps(feed, indent=1) + "\n")
    assets += [out / "SHA256SUMS", out / "latest.json"]
    too_big = [a.name for a in assets if a.stat().st_size > limit]
    if too_big:
        raise SystemExit(f"release_assets: over the per-asset limit: {', '.join(too_big)}")
    return assets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("artifacts", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--repo", required=True, help="OWNER/NAME on GitHub")
    parser.add_argument("--limit", type=int, default=LIMIT, help="bytes per asset (default: under 2 GiB)")
    args = parser.parse_args(argv)
    for asset in prepare(args.artifacts, args.out, tag=args.tag, repo=args.repo, limit=args.limit):
        print(f"{asset.stat().st_size:>14,}  {asset.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
