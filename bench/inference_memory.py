"""Benchmark: predicted vs measured activation memory of one denoising step.

For each network (SD1.5 and SDXL UNets at full size; "Flux-shaped": Flux's real widths (3072
hidden, 24 heads, 512 text tokens) with one double and one single block, since its activation peak
is per block and does not grow with depth, and "Chroma-shaped" the same; "PixArt-shaped": 1152
wide, 16 heads, one block, fed 300 T5 tokens; "SD3-shaped" (``sd3_medium``, ``sd35_medium``,
``sd35_large``): the released widths with two joint blocks, fed 154 text tokens; the UNets that
share a profile (``sd2``, ``sdxl-refiner``, ``ssd-1b``, ``segmind-vega``) at full size, predicted
with their family record's profile), each resolution, batch and dtype, one forward runs
under :class:`core.memory.tracking.ActivationTracker` (peak bytes of live activation tensors,
weights and inputs excluded) and is compared with :func:`core.memory.inference.predict`.

The networks get every weight as a stride-0 view of one zero scalar: the real shapes and the real
kernels at a few bytes of weights, so a full SDXL UNet runs in well under a GiB of RAM. The values
are irrelevant to activation memory (shapes alone decide it).

On CUDA it also reports ``torch.cuda.max_memory_allocated`` above what was allocated before the
step (``cuda_peak_bytes``): that includes kernel workspaces (cuDNN, cuBLAS) the tracker cannot see.

The decoder-LLM text encoders (``--kinds qwen3-4b,gemma2-2b``, any preset of
``core.models.llm``) run at their real width with ``--llm-layers`` layers (the peak is per layer)
over ``--tokens`` prompt tokens per row, against ``core.archs.llm.memory.activation_bytes``; the
tracker's roots are the token ids and the mask, as the tower passes them.

``--fit`` prints least-squares coefficients (relative error) for a network's memory models (the
``MEMORY`` of its package, ``core/archs/<arch>/net.py``) from the rows measured, each with its
worst relative error; a profile with two peaks is fitted per peak. Usage::

    python -m bench.inference_memory [--device cpu] [--kinds sd1,sdxl,flux,pixart] [--sizes 256,384]
        [--batches 1] [--dtypes fp32] [--attention default,math] [--fit]
    python -m bench.inference_memory --kinds qwen3-4b,gemma2-2b --tokens 64,256,1024 --batches 1,2
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from core.archs.catalog import net_of  # noqa: E402
from core.archs.memory import Profile  # noqa: E402
from core.archs.pixart.network import PixArt, PixArtConfig  # noqa: E402
from core.detect.catalog import memory_profile  # noqa: E402
from core.memory import inference  # noqa: E402
from core.memory.tracking import ActivationTracker  # noqa: E402
from core.models.chroma import Chroma, ChromaConfig  # noqa: E402
from core.models.flux import Flux, FluxConfig  # noqa: E402
from core.models.mmdit import MMDiT, MMDiTConfig  # noqa: E402
from core.models.unet import UNetModel  # noqa: E402
from core.models.unet_config import UNetConfig  # noqa: E402
from core.session.testrun import RunConfig, _Inputs  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
TARGET = 0.15  # |predicted / measured - 1|


#: SD3 / SD3.5 at their released widths (64-wide heads) with two joint blocks: a full one (SD3.5
#: medium's with its picture-only second attention) and the last, whose text stream has no MLP
MMDIT_SHAPED = {
    "sd3_medium": MMDiTConfig(depth=2, num_heads=24),
    "sd35_medium": MMDiTConfig(
        depth=2, num_heads=24, pos_embed_max_size=384, qk_norm="rms", dual_attention_layers=(0,)
    ),
    "sd35_large": MMDiTConfig(depth=2, num_heads=38, qk_norm="rms"),
}
#: each kind's network on meta (no memory): full-size UNets, Flux's and Chroma's widths with 1 + 1
#: blocks, PixArt's with 1 block, SD3/SD3.5's with 2 joint blocks. A kind named by a family id (sd2,
#: sdxl-refiner, ssd-1b, segmind-vega, chroma) is predicted with its record's profile, scaled to
#: its width as the planner does
BUILDERS: dict[str, Callable[[], nn.Module]] = {
    "sd1": lambda: UNetModel(UNetConfig.sd1(), device="meta"),
    "sdxl": lambda: UNetModel(UNetConfig.sdxl(), device="meta"),
    "sd2": lambda: UNetModel(UNetConfig.sd2(), device="meta"),
    "sdxl-refiner": lambda: UNetModel(UNetConfig.sdxl_refiner(), device="meta"),
    "ssd-1b": lambda: UNetModel(UNetConfig.ssd_1b(), device="meta"),
    "segmind-vega": lambda: UNetModel(UNetConfig.segmind_vega(), device="meta"),
    "flux": lambda: Flux(FluxConfig(depth=1, depth_single_blocks=1), device="meta"),
    "chroma": lambda: Chroma(ChromaConfig(depth=1, depth_single_blocks=1), device="meta"),
    "pixart": lambda: PixArt(PixArtConfig(depth=1), device="meta"),
    **{k: (lambda c=c: MMDiT(c, device="meta")) for k, c in MMDIT_SHAPED.items()},
}


def build(kind: str) -> nn.Module:
    if kind not in BUILDERS:
        raise SystemExit(f"unknown kind {kind!r}: use one of {', '.join(BUILDERS)}")
    return BUILDERS[kind]()


def profile_of(kind: str) -> str | None:
    """The memory profile a kind is predicted with: its own name, or its family record's."""
    return kind if kind in inference.PROFILES else memory_profile(kind)


def zero_weights(module: nn.Module, device: str, dtype: torch.dtype, real: bool = False) -> nn.Module:
    """Every parameter a stride-0 view of one zero (real shapes, ~no memory), or with ``real``
    a zero-filled tensor of its own (on a GPU, where a kernel would copy a stride-0 weight into
    a workspace that ``max_memory_allocated`` sees); buffers real zeros."""
    zero = torch.zeros((), device=device, dtype=dtype)
    for sub in module.modules():
        for name, p in list(sub._parameters.items()):
            if p is not None:
                w = torch.zeros(p.shape, device=device, dtype=dtype) if real else zero.expand(p.shape)
                sub._parameters[name] = nn.Parameter(w, requires_grad=False)
        for name, b in list(sub._buffers.items()):
            if b is not None:
                sub._buffers[name] = torch.zeros(
                    b.shape, device=device, dtype=dtype if b.is_floating_point() else b.dtype
                )
    return module.eval()


@contextmanager
def attention_kind(kind: str) -> Iterator[None]:
    if kind == "math":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.MATH):
            yield
    else:
        yield


def measure(
    model: nn.Module, size: int, batch: int, dtype: torch.dtype, device: str, attn: str
) -> dict[str, Any]:
    inputs = _Inputs(model, RunConfig(1, size, size, batch, 0, dtype, device))
    inputs.to(device, dtype)
    x = inputs.noise.clone()
    roots = [v for v in vars(inputs).values() if isinstance(v, torch.Tensor)] + [x]
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    with torch.inference_mode(), attention_kind(attn), ActivationTracker(roots) as tracker:
        out = inputs.forward(model, x, 0.5)
        del out
    if cuda:
        torch.cuda.synchronize()
    row: dict[str, Any] = {
        "measured_bytes": tracker.peak_bytes,
        "left_live_bytes": tracker.live_bytes,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if cuda:
        row["cuda_peak_bytes"] = int(torch.cuda.max_memory_allocated() - base)
    return row


def is_llm(kind: str) -> bool:
    from core.models.llm.config import PRESETS

    return kind in PRESETS


def llm_rows(kind: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The encoder at its real widths (``--llm-layers`` layers, stride-0 zero weights) over each
    token count, batch and dtype: tracker peak against the encoder's memory profile."""
    from dataclasses import replace

    from core.archs.llm.memory import activation_bytes
    from core.models.llm import LlmConfig, LlmTextModel

    cfg = replace(LlmConfig.preset(kind), num_layers=args.llm_layers)
    rows = []
    for dname in args.dtypes.split(","):
        dtype = DTYPES[dname]
        model = zero_weights(
            LlmTextModel(cfg, device="meta"), args.device, dtype, args.device.startswith("cuda")
        )
        for batch in (int(b) for b in args.batches.split(",")):
            for tokens in (int(t) for t in args.tokens.split(",")):
                ids = torch.zeros(batch, tokens, dtype=torch.long, device=args.device)
                keep = torch.ones(batch, tokens, dtype=torch.long, device=args.device)
                t0 = time.perf_counter()
                with torch.inference_mode(), ActivationTracker([ids, keep]) as tracker:
                    out = model(ids, keep, taps=(-2,), dtype=dtype)
                    del out
                predicted = activation_bytes(cfg, tokens, batch, dtype.itemsize)
                row = {
                    "kind": kind, "tokens": tokens, "batch": batch, "dtype": dname, "layers": cfg.num_layers,
                    "measured_bytes": tracker.peak_bytes, "predicted_bytes": predicted,
                    "ratio": round(predicted / tracker.peak_bytes, 4),
                    "seconds": round(time.perf_counter() - t0, 2),
                }  # fmt: skip
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
        del model
    return rows


def _attention_name(attn: str, device: str) -> str:
    if attn == "math":
        return "math"
    return "cuda_flash" if device.startswith("cuda") else "cpu_flash"


def run(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for kind in args.kinds.split(","):
        if is_llm(kind):
            rows += llm_rows(kind, args)
            continue
        for dname in args.dtypes.split(","):
            model = zero_weights(build(kind), args.device, DTYPES[dname], args.device.startswith("cuda"))
            for attn in args.attention.split(","):
                for batch in (int(b) for b in args.batches.split(",")):
                    for size in (int(s) for s in args.sizes.split(",")):
                        row: dict[str, Any] = {
                            "kind": kind, "size": size, "batch": batch, "dtype": dname,
                            "attention": _attention_name(attn, args.device),
                        }  # fmt: skip
                        row |= measure(model, size, batch, DTYPES[dname], args.device, attn)
                        work = inference.Workload(size, size, batch, DTYPES[dname].itemsize, row["attention"])
                        profile = profile_of(kind)
                        if profile is not None and inference.has_coefficients(profile, row["attention"]):
                            width = net_of(model).width(getattr(model, "config"))  # noqa: B009
                            row["predicted_bytes"] = inference.predict(profile, work, width)
                            row["ratio"] = round(row["predicted_bytes"] / row["measured_bytes"], 4)
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr, flush=True)
            del model
    ratios = [r["ratio"] for r in rows if "ratio" in r]
    worst = max((abs(r - 1) for r in ratios), default=None)
    report: dict[str, Any] = {
        "bench": "inference_memory",
        "device": args.device,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "target": f"predicted/measured within 1 +- {TARGET}",
        "worst_abs_ratio_error": None if worst is None else round(worst, 4),
        "ok": worst is not None and worst <= TARGET,
        "rows": rows,
    }
    if args.fit:
        report["fit"] = fit([r for r in rows if not is_llm(r["kind"])])
    return report


def _lstsq(rows: list[dict[str, Any]], prof: Profile, attn: str) -> dict[str, Any]:
    """Least squares in relative error of ``measured = bytes * batch * (a * N + q * heads * T**2 + c)``
    (q only for math attention), with the fit's own worst relative error over its points."""
    import numpy as np

    quadratic = attn == "math"
    feats = []
    for r in rows:
        w = inference.Workload(r["size"], r["size"], r["batch"], DTYPES[r["dtype"]].itemsize, attn)
        scale = w.dtype_bytes * w.batch
        n, t = prof.positions(w.width, w.height), prof.attention_tokens(w.width, w.height)
        feats.append([scale * n, scale] + ([scale * prof.heads * t * t] if quadratic else []))
    a = np.array(feats, dtype=float)
    measured = np.array([r["measured_bytes"] for r in rows], dtype=float)
    coef, *_ = np.linalg.lstsq(a / measured[:, None], np.ones(len(rows)), rcond=None)
    worst = float(np.max(np.abs(a @ coef / measured - 1)))
    return {
        "per_position": round(float(coef[0]), 2),
        "constant": round(float(coef[1]), 1),
        **({"per_score": round(float(coef[2]), 4)} if quadratic else {}),
        "points": len(rows),
        "worst_fit_error": round(worst, 6),
    }


def fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (kind, attention): :func:`_lstsq` over the rows. For a profile with a second peak
    (``Coefficients.other_peak``: PixArt's cross-attention, the MMDiTs' text MLP below ~200 px), the
    rows are split by which peak the declared model puts higher and each part fitted alone (a part
    needs two points)."""
    out: dict[str, Any] = {}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["kind"], r["attention"]), []).append(r)
    for (kind, attn), rs in groups.items():
        name = profile_of(kind)
        if name is None:
            continue
        prof = inference.PROFILES[name]
        declared = inference.COEFFICIENTS.get((name, attn))
        if declared is None or declared.other_peak is None:
            out[f"{kind}/{attn}"] = _lstsq(rs, prof, attn)
            continue
        second = declared.other_peak
        parts: dict[str, list[dict[str, Any]]] = {"main": [], "other_peak": []}
        for r in rs:
            n = prof.positions(r["size"], r["size"])
            main = declared.per_position * n + declared.constant
            parts["other_peak" if second[0] * n + second[1] > main else "main"].append(r)
        out[f"{kind}/{attn}"] = {part: _lstsq(p, prof, attn) for part, p in parts.items() if len(p) >= 2}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--kinds", default="sd1,sdxl,flux")
    p.add_argument("--sizes", default="256,384")
    p.add_argument("--batches", default="1")
    p.add_argument("--dtypes", default="fp32")
    p.add_argument("--attention", default="default", help="default (the device's SDPA) and/or math")
    p.add_argument("--tokens", default="64,256,1024", help="LLM encoders: prompt tokens per row")
    p.add_argument("--llm-layers", type=int, default=2, help="LLM encoders: layers built (real widths)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--fit", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    report = run(args)
    print(json.dumps(report, indent=1))
    return 0 if report["ok"] or args.fit else 1


if __name__ == "__main__":
    raise SystemExit(main())
