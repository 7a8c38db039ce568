"""A whole SD1.5 picture with IP-Adapter FaceID against diffusers' StableDiffusionPipeline with
``load_ip_adapter`` (tiny UNet and VAE, 768-wide CLIP text, random weights; the adapter's MLP
projection and keys/values at real width), set up as ComfyUI_IPAdapter_plus computes: the face read
by Loadout's face analysis (core/faces) from small ONNX graphs with buffalo_l's signatures
(tests/core/faces/face_graphs.py), diffusers handed insightface's own ``normed_embedding`` of the same
picture (``ip_adapter_image_embeds``; the negative a zero embedding, as the pack's).

* without the FaceID LoRA: diffusers given the adapter without its LoRA keys (the pack never
  applies them);
* with it: Loadout applies h94's separate ``_lora.safetensors`` with its LoRA code (the artist's
  LoRA stack), diffusers the LoRA inside the adapter file (``load_ip_adapter`` applies it at 1.0):
  the same picture."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from core.archs.clip_vision.preprocess import clip_preprocess
from core.faces.analysis import open_face_reader
from core.generate.ip_adapter import EMPTY_SIZE, AppliedIpAdapter, IpAdapterPass
from core.generate.ip_faceid import read_face
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.request import ImageSettings, Sampling
from core.loading.image_encoder import load_image_encoder
from core.loading.ip_adapter import load_ip_adapter
from core.loading.loader import LoadedComponent
from core.models.vae import SD1_LATENT
from core.patching.lora_stack import LoraStack
from core.sampling import for_family
from core.text.conditioning import TextEncoders
from tests.core.faces.face_graphs import face_picture, write_buffalo
from tests.core.generate.controlnet_pair import UNET
from tests.core.generate.reference import (
    clip_pair,
    clip_tokenizer,
    discrete_comfy_schedule,
    discrete_scheduler,
    to_unit_image,
    vae_pair,
)
from tests.core.image_prompts.faceid_files import faceid_file, lora_file, split_state
from tests.core.image_prompts.ip_files import unet_pair
from tests.core.image_prompts.vision_files import save_transformers, vision_reference

diffusers = pytest.importorskip("diffusers")
pytest.importorskip("peft")
insightface_app = pytest.importorskip("insightface.app")
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.usefixtures("one_thread"),
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Networks, Path, Path]:
    root = tmp_path_factory.mktemp("faceid_pipe")
    tokenizer = clip_tokenizer(root / "clip_l", pad_with_end=True)
    hf_clip, clip = clip_pair(768, act="quick_gelu", projection=None, seed=1)
    hf_unet, unet = unet_pair(seed=2)
    hf_vae, vae = vae_pair(4, SD1_LATENT, seed=3)
    pipe = diffusers.StableDiffusionPipeline(
        vae=hf_vae, text_encoder=hf_clip, tokenizer=tokenizer, unet=hf_unet,
        scheduler=discrete_scheduler("euler"), safety_checker=None, feature_extractor=None,
        image_encoder=None, requires_safety_checker=False,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    ip = faceid_file(root / "ipadapter" / "ip-adapter-faceid_sd15.safetensors", hf_unet, 768, seed=6)
    buffalo = write_buffalo(root / "insightface" / "models" / "buffalo_l")
    return pipe, Networks("sd1", unet, TextEncoders(clip_l=clip), vae), ip, buffalo


def _diffusers(pipe: Any, embedding: np.ndarray, weight: float) -> np.ndarray:
    pos = torch.from_numpy(embedding)[None, None]
    pipe.set_ip_adapter_scale(weight)
    with discrete_comfy_schedule(pipe.scheduler, for_family("sd1"), "euler", "karras", 4) as sigmas:
        noise = torch.randn((1, 4, 8, 8), generator=torch.Generator("cpu").manual_seed(11))
        out = pipe(
            "a tiny fox", negative_prompt="blurry", num_inference_steps=4, guidance_scale=6.0, latents=noise,
            height=64, width=64, output_type="np", sigmas=sigmas,
            ip_adapter_image_embeds=[torch.cat([torch.zeros_like(pos), pos])],
        ).images  # fmt: skip
    return np.asarray(out)


def _face_reference(buffalo: Path, rgb: np.ndarray) -> Any:
    app = insightface_app.FaceAnalysis(name=str(buffalo), providers=["CPUExecutionProvider"])
    app.prepare(ctx_id=0, det_size=(640, 640))  # the pack's insightface_loader
    return app.get(np.ascontiguousarray(rgb[..., ::-1]))[0]


def test_faceid_plus_v2_picture_equals_diffusers(
    setup: tuple[Any, Networks, Path, Path], tmp_path: Path
) -> None:
    """FaceID Plus v2: CLIP vision of the face cropped at 224 by insightface's ``norm_crop`` (the
    pack's), diffusers' ``IPAdapterFaceIDPlusImageProjection`` given those states as ``clip_embeds``
    with the shortcut at the face weight (the pack's ``weight_faceidv2``: here its default, twice
    the weight)."""
    from insightface.utils import face_align

    pipe, nets, _, buffalo = setup
    tower = vision_reference(layers=2, seed=4)
    vision = load_image_encoder(save_transformers(tower, tmp_path / "clip_vision.safetensors"))
    ip = faceid_file(
        tmp_path / "ip-adapter-faceid-plusv2_sd15.safetensors", pipe.unet, 768, seed=8, plus=True
    )
    rgb = face_picture()
    ref = _face_reference(buffalo, rgb)
    face = read_face(open_face_reader(buffalo), rgb, Path("face.png"))
    adapter = load_ip_adapter(ip)
    assert adapter.variant == "faceid-plusv2" and adapter.encoder == "clip-vit-h"
    s = Sampling(seed=11, steps=4, cfg=6.0, sampler="euler", scheduler="karras")
    settings = ImageSettings(prompt="a tiny fox", negative="blurry", width=64, height=64, sampling=s)
    pipeline = Pipeline(nets, Compute())
    full = (pipeline.sampling.percent_to_sigma(0.0), pipeline.sampling.percent_to_sigma(1.0))
    weight = 0.7
    applied = AppliedIpAdapter(adapter, vision, rgb, weight, full, face=face, face_scale=2 * weight)
    ours = to_unit_image(pipeline.run(settings, Hooks(), passes=[IpAdapterPass((applied,))])[0])

    crop = face_align.norm_crop(rgb, landmark=ref.kps, image_size=224)
    unit = torch.from_numpy(crop).float().div(255).permute(2, 0, 1)[None]
    black = torch.zeros(1, 3, EMPTY_SIZE, EMPTY_SIZE)
    with torch.no_grad():
        pos, neg = (
            tower(pixel_values=clip_preprocess(p), output_hidden_states=True).hidden_states[-2]
            for p in (unit, black)
        )
    pipe.load_ip_adapter(
        split_state(load_file(str(ip)), lora=False), subfolder="", weight_name="x", image_encoder_folder=None
    )
    try:
        proj = pipe.unet.encoder_hid_proj.image_projection_layers[0]
        proj.clip_embeds, proj.shortcut, proj.shortcut_scale = (
            torch.cat([neg, pos])[:, None],
            True,
            2 * weight,
        )
        err = float(np.abs(ours - _diffusers(pipe, ref.normed_embedding, weight)).max())
    finally:
        pipe.unload_ip_adapter()
    print(f"FaceID Plus v2: max |ours - diffusers| = {err:.1e}")
    assert err < 3 / 255


def test_faceid_picture_equals_diffusers_with_and_without_the_lora(
    setup: tuple[Any, Networks, Path, Path], tmp_path: Path
) -> None:
    pipe, nets, ip, buffalo = setup
    rgb = face_picture()
    embedding = _face_reference(buffalo, rgb).normed_embedding
    face = read_face(open_face_reader(buffalo), rgb, Path("face.png"))
    np.testing.assert_array_equal(face.normed_embedding, embedding)

    adapter = load_ip_adapter(ip)
    assert adapter.variant == "faceid" and adapter.encoder is None and adapter.embeds == "face"
    s = Sampling(seed=11, steps=4, cfg=6.0, sampler="euler", scheduler="karras")
    settings = ImageSettings(prompt="a tiny fox", negative="blurry", width=64, height=64, sampling=s)
    pipeline = Pipeline(nets, Compute())
    full = (pipeline.sampling.percent_to_sigma(0.0), pipeline.sampling.percent_to_sigma(1.0))
    weight = 0.8
    applied = AppliedIpAdapter(adapter, None, rgb, weight, full, face=face)

    def ours() -> np.ndarray:
        return to_unit_image(
            Pipeline(nets, Compute()).run(settings, Hooks(), passes=[IpAdapterPass((applied,))])[0]
        )

    plain = to_unit_image(Pipeline(nets, Compute()).run(settings, Hooks())[0])
    flat = load_file(str(ip))
    # the pack: the adapter alone (its LoRA keys never applied)
    pipe.load_ip_adapter(
        split_state(flat, lora=False), subfolder="", weight_name="x", image_encoder_folder=None
    )
    without = ours()
    err = float(np.abs(without - _diffusers(pipe, embedding, weight)).max())
    print(f"FaceID without its LoRA: max |ours - diffusers| = {err:.1e}")
    assert err < 3 / 255
    assert float(np.abs(without - plain).max()) > 1e-2  # the face changed the picture
    pipe.unload_ip_adapter()

    # with the LoRA: ours from the separate LoRA file on the LoRA stack, diffusers' from the adapter
    lora = lora_file(tmp_path / "ip-adapter-faceid_sd15_lora.safetensors", flat, pipe.unet)
    comp = LoadedComponent("diffusion_model", "sd1", "", "original", nets.diffusion, UNET, None)  # type: ignore[arg-type]
    stack = LoraStack([comp])
    entry = stack.add(lora, force=True)  # tiny widths: the family guess is not the point here
    assert entry.report.counts["unmatched"] == 0 and entry.report.counts["matched"] == len(
        [k for k in flat if "_lora.down" in k]
    )
    stack.apply()
    try:
        pipe.load_ip_adapter(
            split_state(flat, lora=True), subfolder="", weight_name="x", image_encoder_folder=None
        )
        with_lora = ours()
        err = float(np.abs(with_lora - _diffusers(pipe, embedding, weight)).max())
        print(f"FaceID with its LoRA: max |ours - diffusers| = {err:.1e}")
        assert err < 3 / 255
        assert float(np.abs(with_lora - without).max()) > 1e-2  # the LoRA acted
    finally:
        stack.unpatch()
