"""Benchmarks of LoRA patching. Two parts, each printing one JSON object.

``python -m bench.patch bake`` (the default): one LoRA baked into a full-size SD1.5 fp16 checkpoint
(real random data, from ``bench/load.py``), a kohya rank-32 LoCon of 350 modules (every attention,
feed-forward and projection layer, every ResNet and sampler convolution of the UNet, and the text
encoder), one torch thread, each method in a fresh subprocess (so ``ru_maxrss`` is its own peak):

* ``baseline_comfy_bake``: a plain re-implementation of ComfyUI's per-key bake (``patch_weight_to_device``
  with ``calculate_weight`` for LoRA): per key, a float32 copy of the weight, the float32 product
  ``up @ down``, ``W += (strength * alpha / rank) * product``, the cast back to fp16, the original
  kept as the backup;
* ``loadout_bake``: ``LoraStack.apply()``; then, in the same process, a strength change shown live
  (``set_strength`` + ``preview()``) and the bake after the slider is released.

Both bake the same recorded adapters into the same loaded model; the patched weights are hashed
afterwards (untimed), so the JSON says whether the two bakes agree bit for bit.

``python -m bench.patch stack``: a 3-LoRA stack on a full-size SDXL UNet and one strength change:

* ``full_apply``: record three kohya rank-32 LoRAs (722 attention/ff modules each) and bake them;
* ``baseline_full_repatch``: what a peer does on a strength change: restore every weight and bake
  the whole stack again from scratch;
* ``live_strength_change``: Loadout's slider path: set one LoRA's strength and ``preview()``; the
  change runs as low-rank side paths, so the next forward already reflects it;
* ``bake_after_release``: the slider stops, ``apply()`` bakes the new strength (only the keys
  whose stack changed);
* ``forward``: one UNet forward (1x4x32x32 latent) baked vs with the live side paths, to show
  what the preview costs per step.

The UNet comes from a sparse full-size SDXL checkpoint (zeros: arithmetic costs the same), the
LoRAs are real random data.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.loading.loader import load_diffusion_model  # noqa: E402
from core.patching.lora_stack import LoraStack  # noqa: E402
from tests.fixtures import layouts_diffusion as ld  # noqa: E402
from tests.fixtures.layouts_lora import (  # noqa: E402
    Layer,
    clip_layers,
    lora_layout,
    unet_attention_layers,
)
from tests.fixtures.st_files import write_sparse, write_tensors  # noqa: E402


def _files(cache: Path, rank: int) -> tuple[Path, list[Path]]:
    cache.mkdir(parents=True, exist_ok=True)
    base = cache / "sdxl_sparse.safetensors"
    if not base.exists():
        write_sparse(base, ld.sdxl_checkpoint())
    shapes = lora_layout(unet_attention_layers("sdxl", naming="original"), "kohya", rank=rank)
    loras = []
    for seed in range(3):
        p = cache / f"sdxl_lora_{seed}_r{rank}.safetensors"
        if not p.exists():
            g = torch.Generator().manual_seed(seed)
            tensors = {
                k: (
                    torch.tensor(float(rank)) if k.endswith(".alpha") else torch.randn(s, generator=g) * 0.01
                ).half()
                for k, s in shapes.items()
            }
            write_tensors(p, tensors)
        loras.append(p)
    return base, loras


def _t(fn) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def stack_main(args: argparse.Namespace) -> None:
    base, loras = _files(args.cache, args.rank)
    unet = load_diffusion_model(base)
    stack = LoraStack([unet])
    t_record, entries = _t(lambda: [stack.add(p, 1.0) for p in loras])
    modules = [len(e.report.matched) for e in entries]  # type: ignore[attr-defined]
    t_full, rep = _t(stack.apply)
    recomputed_full = rep["diffusion_model"].recomputed  # type: ignore[index]

    def full_repatch() -> object:
        stack.unpatch()
        for patcher in stack.patchers.values():
            patcher.forget_deltas()
        return stack.apply()

    t_baseline, _ = _t(full_repatch)
    target = entries[1].id  # type: ignore[index]

    def live() -> bool:
        stack.set_strength(target, model=0.35)
        return stack.preview()

    t_live, ok = _t(live)
    out: dict[str, object] = {}
    if not args.no_forward:
        x = torch.randn(1, 4, 32, 32, dtype=torch.float16)
        ts = torch.tensor([500.0])
        ctx = torch.randn(1, 77, 2048, dtype=torch.float16)
        y = torch.randn(1, 2816, dtype=torch.float16)
        with torch.no_grad():
            t_fwd_live, _ = _t(lambda: unet.module(x.float(), ts, ctx.float(), y.float()))
    t_bake, rep2 = _t(stack.apply)
    if not args.no_forward:
        with torch.no_grad():
            t_fwd_baked, _ = _t(lambda: unet.module(x.float(), ts, ctx.float(), y.float()))
        out = {
            "forward_baked_s": round(t_fwd_baked, 3),
            "forward_with_live_side_paths_s": round(t_fwd_live, 3),
        }
    result = {
        "bench": "patch",
        "model": "SDXL UNet, full size (sparse checkpoint)",
        "loras": {"count": len(loras), "rank": args.rank, "matched_modules": modules},
        "seconds": {
            "record_3_loras": round(t_record, 3),
            "full_apply": round(t_full, 3),
            "baseline_full_repatch": round(t_baseline, 3),
            "live_strength_change": round(t_live, 5),
            "bake_after_release": round(t_bake, 3),
            **out,
        },
        "keys_recomputed": {
            "full_apply": recomputed_full,
            "bake_after_release": rep2["diffusion_model"].recomputed,  # type: ignore[index]
        },
        "live_preview_ok": ok,
        "ratio_full_repatch_over_live_change": round(t_baseline / max(t_live, 1e-9), 1),
        "ratio_full_repatch_over_bake": round(t_baseline / t_bake, 2),
        "target": "strength change >= 10x faster than a full re-patch",
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "python": platform.python_version(), "torch": torch.__version__},
    }  # fmt: skip
    print(json.dumps(result, indent=1))


# -- the bake comparison ---------------------------------------------------------------------------


def sd1_resnet_layers() -> list[Layer]:
    """Every convolution and time projection of SD1's ResNets and samplers (diffusers names): what
    a kohya LoCon (``conv_dim``) trains besides the attention layers."""
    out: list[Layer] = []

    def resnet(prefix: str, cin: int, cout: int) -> None:
        out.extend([Layer(f"{prefix}.conv1", cout, cin, 3), Layer(f"{prefix}.conv2", cout, cout, 3)])
        out.append(Layer(f"{prefix}.time_emb_proj", cout, 1280))
        if cin != cout:
            out.append(Layer(f"{prefix}.conv_shortcut", cout, cin, 1))

    channels = [320, 640, 1280, 1280]
    skips, prev = [320], 320
    for i, c in enumerate(channels):
        for j in range(2):
            resnet(f"down_blocks.{i}.resnets.{j}", prev, c)
            prev = c
            skips.append(c)
        if i < 3:
            out.append(Layer(f"down_blocks.{i}.downsamplers.0.conv", c, c, 3))
            skips.append(c)
    for j in range(2):
        resnet(f"mid_block.resnets.{j}", 1280, 1280)
    for i, c in enumerate(reversed(channels)):
        for j in range(3):
            resnet(f"up_blocks.{i}.resnets.{j}", prev + skips.pop(), c)
            prev = c
        if i < 3:
            out.append(Layer(f"up_blocks.{i}.upsamplers.0.conv", c, c, 3))
    return out


def _bake_files(cache: Path, rank: int) -> tuple[Path, Path]:
    from bench.load import ensure_file

    ckpt = ensure_file(ROOT / ".bench-cache" / "load" / "sd15_fp16_random.safetensors", ld.sd1_checkpoint())
    layers = [*unet_attention_layers("sd1"), *sd1_resnet_layers(), *clip_layers(768, 12, "te1")]
    lora = cache / f"sd15_locon_{len(layers)}_r{rank}.safetensors"
    if not lora.exists():
        g = torch.Generator().manual_seed(0)
        shapes = lora_layout(layers, "kohya", rank=rank)
        alpha = torch.tensor(rank / 2.0)  # alpha/rank 0.5, as kohya's common alpha = dim/2
        tensors = {k: (alpha if k.endswith(".alpha") else torch.randn(s, generator=g) * 0.02).half()
                   for k, s in shapes.items()}  # fmt: skip
        cache.mkdir(parents=True, exist_ok=True)
        write_tensors(lora, tensors)
    return ckpt, lora


def comfy_bake(stack: LoraStack) -> int:
    """A plain re-implementation of ComfyUI's per-key bake, on the adapters the stack recorded.
    Returns the number of keys baked; the originals are kept as backups, as ComfyUI does."""
    from core.models.state import get_tensor, set_tensor
    from core.patching.adapters import LoRAAdapter

    backups: dict[str, torch.Tensor] = {}
    for patcher in stack.patchers.values():
        model = patcher.model
        for key in sorted(patcher.patched_keys()):
            weight = get_tensor(model, key)
            backups[key] = weight
            temp = weight.to(torch.float32, copy=True)
            for s in patcher.sets:
                for p in s.patches.get(key, ()) if s.active else ():
                    a = p.adapter
                    assert isinstance(a, LoRAAdapter) and a.mid is None and a.dora_scale is None
                    mat1 = a.up.to(torch.float32)
                    mat2 = a.down.to(torch.float32)
                    alpha = a.alpha / mat2.shape[0] if a.alpha is not None else 1.0
                    target = temp if p.offset is None else temp.narrow(*p.offset)
                    diff = torch.mm(mat1.flatten(start_dim=1), mat2.flatten(start_dim=1)).reshape(
                        target.shape
                    )
                    target += ((s.strength * alpha) * diff).type(target.dtype)
            set_tensor(model, key, temp.to(weight.dtype))
    return len(backups)


def _cpu() -> float:
    """User + system CPU seconds of this process: on a shared machine, wall time also counts the
    time other jobs held the cores."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _digest(stack: LoraStack) -> str:
    from core.models.state import get_tensor

    h = hashlib.sha256()
    for _, patcher in sorted(stack.patchers.items()):
        for key in sorted(patcher.patched_keys()):
            h.update(get_tensor(patcher.model, key).contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def run_bake(method: str, ckpt: Path, lora: Path) -> dict[str, object]:
    """One method in this (fresh) process."""
    from bench.load import _proc_status
    from core.loading.loader import LoadOptions, load_checkpoint

    torch.set_num_threads(1)
    bundle = load_checkpoint(ckpt, LoadOptions(dtype=None, device="cpu"))
    stack = LoraStack(bundle.components)
    entry = stack.add(lora, 1.0, 1.0)
    rss_before = _rss()
    out: dict[str, object] = {"method": method, "modules": len(entry.report.matched)}
    out |= {"unmatched": len(entry.report.unmatched), "skipped": len(entry.skipped)}
    cpu0, t0 = _cpu(), time.perf_counter()
    if method == "baseline_comfy_bake":
        out["keys"] = comfy_bake(stack)
    else:
        out["keys"] = sum(r.recomputed for r in stack.apply().values())
    out["seconds"] = time.perf_counter() - t0
    out["cpu_seconds"] = _cpu() - cpu0
    out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    status = _proc_status()  # private (RssAnon) and file-backed (RssFile) pages after the bake
    out |= {"rss_anon_after": status.get("RssAnon", 0), "rss_file_after": status.get("RssFile", 0)}
    out["rss_before_bake"] = rss_before
    out["digest"] = _digest(stack)  # untimed, after the peak is read
    if method == "loadout_bake":
        t0 = time.perf_counter()
        stack.set_strength(entry.id, model=0.35, clip=0.35)
        out["preview_ok"] = stack.preview()
        out["live_strength_change_seconds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        out["rebake_keys"] = sum(r.recomputed for r in stack.apply().values())
        out["bake_after_release_seconds"] = time.perf_counter() - t0
    return out


def bake_main(args: argparse.Namespace) -> None:
    from bench.load import machine, warm

    ckpt, lora = _bake_files(args.cache, args.rank)
    warm(ckpt)
    warm(lora)
    methods = ["baseline_comfy_bake", "loadout_bake"]
    runs: dict[str, list[dict[str, object]]] = {m: [] for m in methods}
    for _ in range(args.repeat):
        for m in methods:  # interleaved, so drift from other jobs hits both
            cmd = [sys.executable, "-m", "bench.patch", "_child", m, str(ckpt), str(lora)]
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
            runs[m].append(json.loads(done.stdout))

    def med(m: str, field: str) -> float:
        return float(statistics.median(float(r[field]) for r in runs[m]))  # type: ignore[arg-type]

    summary: dict[str, object] = {}
    for m in methods:
        summary[m] = {
            "seconds": round(med(m, "seconds"), 3),
            "range": [round(min(float(r["seconds"]) for r in runs[m]), 3),  # type: ignore[arg-type]
                      round(max(float(r["seconds"]) for r in runs[m]), 3)],  # type: ignore[arg-type]
            "cpu_seconds": round(med(m, "cpu_seconds"), 3),
            "peak_rss_gb": round(med(m, "peak_rss") / 1e9, 3),
            "rss_before_bake_gb": round(med(m, "rss_before_bake") / 1e9, 3),
            "rss_anon_after_gb": round(med(m, "rss_anon_after") / 1e9, 3),
            "rss_file_after_gb": round(med(m, "rss_file_after") / 1e9, 3),
            "keys": runs[m][0]["keys"],
            "digest": runs[m][0]["digest"],
        }  # fmt: skip
    base_m, ours_m = methods
    ours = runs[ours_m]
    result = {
        "bench": "patch-bake",
        "checkpoint": {"path": ckpt.name, "bytes": ckpt.stat().st_size},
        "lora": {"path": lora.name, "bytes": lora.stat().st_size, "rank": args.rank,
                 **{k: ours[0][k] for k in ("modules", "unmatched", "skipped")}},
        "runs": args.repeat,
        **summary,
        "loadout_live_strength_change_seconds": round(med("loadout_bake", "live_strength_change_seconds"), 5),
        "loadout_bake_after_release_seconds": round(med("loadout_bake", "bake_after_release_seconds"), 3),
        "loadout_preview_ok": all(bool(r["preview_ok"]) for r in ours),
        "ratio_time_vs_baseline": round(med(ours_m, "seconds") / med(base_m, "seconds"), 3),
        "ratio_cpu_time_vs_baseline": round(med(ours_m, "cpu_seconds") / med(base_m, "cpu_seconds"), 3),
        "ratio_peak_rss_vs_baseline": round(med(ours_m, "peak_rss") / med(base_m, "peak_rss"), 3),
        "bit_identical": len({r["digest"] for rs in runs.values() for r in rs}) == 1,
        "target": "time <= 0.5x the baseline, peak RSS <= the baseline's",
        "machine": machine(torch.__version__),
    }  # fmt: skip
    print(json.dumps(result, indent=1))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        method, ckpt, lora = sys.argv[2:5]
        print(json.dumps(run_bake(method, Path(ckpt), Path(lora))))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("part", nargs="?", choices=["bake", "stack"], default="bake")
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3, help="bake: subprocess rounds per method")
    ap.add_argument("--cache", type=Path, default=ROOT / ".bench-cache" / "patch")
    ap.add_argument("--no-forward", action="store_true", help="stack: skip the forward timings")
    args = ap.parse_args()
    if args.part == "bake":
        bake_main(args)
    else:
        stack_main(args)


if __name__ == "__main__":
    main()
