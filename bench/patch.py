"""Benchmark: a 3-LoRA stack on a full-size SDXL UNet, and one strength change.

In the same run, on the same model:

* ``full_apply``: record three kohya rank-32 LoRAs (722 attention/ff modules each) and bake them;
* ``baseline_full_repatch``: what a peer does on a strength change: restore every weight and bake
  the whole stack again from scratch (no cached deltas);
* ``live_strength_change``: Loadout's slider path: set one LoRA's strength and ``preview()``; the
  change runs as low-rank side paths, so the next forward already reflects it;
* ``bake_after_release``: the slider stops, ``apply()`` bakes the new strength (only the keys
  whose stack changed; cached deltas used where the budget allowed);
* ``forward``: one UNet forward (1x4x32x32 latent) baked vs with the live side paths, to show
  what the preview costs per step.

The UNet comes from a sparse full-size SDXL checkpoint (zeros: arithmetic costs the same), the
LoRAs are real random data. Prints one JSON object. ``python -m bench.patch``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.loading.loader import load_diffusion_model  # noqa: E402
from core.patching.lora_stack import LoraStack  # noqa: E402
from tests.fixtures import layouts_diffusion as ld  # noqa: E402
from tests.fixtures.layouts_lora import lora_layout, unet_attention_layers  # noqa: E402
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--cache", type=Path, default=ROOT / ".bench-cache" / "patch")
    ap.add_argument("--no-forward", action="store_true", help="skip the forward timings")
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
