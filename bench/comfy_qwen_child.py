"""ComfyUI's Qwen-Image text-to-image graph, run headless inside ComfyUI's source tree (the child
process of ``bench.comfy_qwen``): the template's nodes called in its order, on the CPU (``--cpu``).

``python comfy_qwen_child.py FOLDER SIZE STEPS SEED PROMPT TRACE OUT.png`` with ComfyUI's tree as
the working directory and on the path. Appends a line to TRACE (``stage seconds``) as each node
finishes, so a run that is stopped (the RAM limit) says how far it got; prints one JSON object.
"""

from __future__ import annotations

import json
import sys
import time
import types

T0 = time.perf_counter()
FOLDER, SIZE, STEPS, SEED, PROMPT, TRACE, OUT = sys.argv[1:8]
sys.argv = [sys.argv[0], "--cpu"]
# torchvision's only wheel for this torch is a CUDA build whose compiled ops do not load on a CPU
# torch; its fake-op registrations then fail at import. ComfyUI imports torchvision for Stable
# Cascade's coder only (nothing on this graph calls it): its Python package is imported without them.
sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")


def trace(stage: str) -> None:
    with open(TRACE, "a") as fh:
        fh.write(f"{stage} {time.perf_counter() - T0:.1f}\n")


import comfy.options  # noqa: E402

comfy.options.enable_args_parsing()
import folder_paths  # noqa: E402
import nodes  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from comfy_extras.nodes_sd3 import EmptySD3LatentImage  # noqa: E402
from PIL import Image  # noqa: E402

trace("imported")
for kind in ("diffusion_models", "text_encoders", "vae"):
    folder_paths.add_model_folder_path(kind, FOLDER, is_default=True)
times: dict[str, float] = {}


def timed(name: str, fn, *args, **kw):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    out = fn(*args, **kw)
    times[name] = round(time.perf_counter() - t, 1)
    trace(name)
    return out


(model,) = timed("unet_loader", nodes.UNETLoader().load_unet, "qwen_image_fp8_e4m3fn.safetensors", "default")
(clip,) = timed(
    "clip_loader",
    nodes.CLIPLoader().load_clip,
    "qwen_2.5_vl_7b_fp8_scaled.safetensors",
    "qwen_image",
    "default",
)
(vae,) = timed("vae_loader", nodes.VAELoader().load_vae, "qwen_image_vae.safetensors")
(positive,) = timed("text_encode_positive", nodes.CLIPTextEncode().encode, clip, PROMPT)
(negative,) = timed("text_encode_negative", nodes.CLIPTextEncode().encode, clip, "")
latent = EmptySD3LatentImage.execute(int(SIZE), int(SIZE), 1)[0]
(samples,) = timed(
    "ksampler",
    nodes.common_ksampler,
    model,
    int(SEED),
    int(STEPS),
    1.0,
    "euler",
    "simple",
    positive,
    negative,
    latent,
)
(pixels,) = timed("vae_decode", nodes.VAEDecode().decode, vae, samples)
picture = (pixels[0].clamp(0, 1) * 255).round().to(torch.uint8).numpy()
Image.fromarray(np.ascontiguousarray(picture)).save(OUT)
print(
    json.dumps(
        {
            "seconds": times,
            "finite": bool(torch.isfinite(pixels).all()),
            "weight_dtype": str(model.model.diffusion_model.img_in.weight.dtype),
            "total_seconds": round(time.perf_counter() - T0, 1),
        }
    )
)
