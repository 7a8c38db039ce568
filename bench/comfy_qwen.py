"""ComfyUI 0.3.64 on the Qwen-Image picture bench's files, in the same RAM limit (``bench.qwen_image
--comfy DIR``): its own loaders, text encoder, sampler and VAE (``bench/comfy_qwen_child.py``) in a
child process under the same ``RLIMIT_DATA``, memory sampled the same way (``bench.limited``).

ComfyUI's source tree (DIR) is copied once beside the files and completed with what a git checkout
has and a copy of the Python files may lack: ``protocol.py`` (the binary event numbers its progress
module imports) and ``comfy/text_encoders/qwen25_tokenizer`` (written from the Qwen vocabulary, as
tests/fixtures/qwen_tokenizer_files.py does: the ids equal). Packages ComfyUI imports that Loadout's
environment lacks (torchvision, av) come from ``--comfy-deps`` (``pip install --no-deps --target``).
``--comfy-watchdog``: the limit is on the private memory ComfyUI holds (killed when its RssAnon
passes it) instead of the kernel's ``RLIMIT_DATA``, which refuses its copy-on-write mapping of the
20 GB file before it reads a byte.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from bench.limited import run_limited

CHILD = Path(__file__).with_name("comfy_qwen_child.py")
#: the numbers of ComfyUI's binary websocket events (its ``protocol.py``; only imported here)
PROTOCOL = "class BinaryEventTypes:\n" + "".join(
    f"    {n} = {i}\n"
    for i, n in enumerate(
        ("PREVIEW_IMAGE", "UNENCODED_PREVIEW_IMAGE", "TEXT", "PREVIEW_IMAGE_WITH_METADATA"), start=1
    )
)


def comfy_tree(source: Path, folder: Path) -> Path:
    from tests.fixtures.qwen_tokenizer_files import write_qwen2_tokenizer

    tree = folder / "comfyui"
    if not tree.exists():
        shutil.copytree(source, tree)
    if not (tree / "protocol.py").exists():
        (tree / "protocol.py").write_text(PROTOCOL)
    tokenizer = tree / "comfy" / "text_encoders" / "qwen25_tokenizer"
    if not (tokenizer / "merges.txt").exists():
        write_qwen2_tokenizer(tokenizer)
    return tree


def comfy_row(files: tuple[Path, Path, Path], args: argparse.Namespace, data: int, source: Path) -> dict:
    from bench.qwen_image import PROMPT, _digest

    folder = Path(args.folder)
    tree = comfy_tree(source, folder)
    trace = folder / "comfy_trace.txt"
    trace.unlink(missing_ok=True)
    out = folder / f"comfy_{args.size}.png"
    out.unlink(missing_ok=True)
    path = [str(tree)] + ([args.comfy_deps] if args.comfy_deps else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    cmd = [sys.executable, "-P", str(CHILD), str(folder), str(args.size), str(args.steps),
           str(args.seed), PROMPT, str(trace), str(out)]  # fmt: skip
    load = os.getloadavg()
    if args.comfy_watchdog:  # the private memory it holds, not the size of its mappings
        run = run_limited(cmd, None, cwd=tree, env=env, trace=trace, anon_cap=data)
    else:
        run = run_limited(cmd, data, cwd=tree, env=env, trace=trace)
    report = json.loads(run.stdout.strip().splitlines()[-1]) if run.returncode == 0 else {}
    return {
        "tool": "comfyui",
        "version": (tree / "comfyui_version.py").read_text().split('"')[1],
        "command": " ".join(cmd),
        "limit": "RssAnon watchdog" if args.comfy_watchdog else "RLIMIT_DATA",
        "returncode": run.returncode,
        "killed_by_watchdog": run.killed,
        "wall_seconds": run.wall_seconds,
        "seconds": report.get("seconds"),
        "seconds_per_step": (report.get("seconds") or {}).get("ksampler"),
        "finite": report.get("finite"),
        "weight_dtype": report.get("weight_dtype"),
        **run.memory(),
        "stages": run.stages,
        "picture_sha256": _digest(out),
        "error": None if run.returncode == 0 else run.stderr[-3000:],
        "load_average_at_start": load,
    }
