"""Prompt to picture with loaded networks: encode -> sample -> decode, as ComfyUI's
CLIPTextEncode -> KSampler (Empty Latent Image or VAEEncode) -> VAEDecode.

The pipeline owns no memory policy: before each phase it calls ``hooks.place(phase)``, which a
session answers by asking the memory manager to place that phase's models (evicting or partially
offloading the others), and ``hooks.check`` between steps and layers, which raises
``InterruptedByUser`` when the user stopped. Nothing here changes a model, so a stopped run leaves
every model as it was.

Prompt conditioning is cached (:class:`core.text.cache.ConditioningCache`) by the text encoders'
identity and LoRA clip strengths (``hooks.text_key``; with ``hooks.clip_hooks`` the text-encoder
patches each prompt carries, :mod:`core.generate.clip_hooks`): a new seed or a UNet LoRA strength
does not re-encode the prompt.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor, nn

from core.archs.catalog import CODECS, TEXTS
from core.archs.protocols import ExtraInputs, LatentCodec, TextOutput
from core.archs.references import NO_PICTURES, PromptPictures
from core.detect.catalog import diffusion_spec
from core.errors import LoadoutError, ModelMismatchError
from core.finite import require_finite
from core.generate.clip_hooks import NO_LABELS
from core.generate.events import GenerateProgress
from core.generate.network import NetworkAdapter
from core.generate.pipeline_records import Compute, Hooks, Networks, Timings
from core.generate.request import ImageSettings, Sampling
from core.sampling import Conditioning as SamplingConditioning
from core.sampling import SamplingRequest, StepProgress, empty_latent, latent_format_for, sample
from core.sampling.model_sampling import from_spec
from core.sampling.patches import NO_MODEL_PATCHES, ModelPatches
from core.sampling.samplers import get_sampler
from core.text.cache import CacheKey, ConditioningCache
from core.text.clip_tokenizer import ClipTokenizer
from core.text.conditioning import EncodeOptions, PromptConditioning, PromptEncoder
from core.text.embeddings import NO_EMBEDDINGS, EmbeddingFolders
from core.text.t5_tokenizer import T5Tokenizer

if TYPE_CHECKING:
    from core.generate.passes import Pass

__all__ = ["Compute", "Hooks", "Networks", "Pipeline", "Timings", "vae_decode_bytes"]


def vae_decode_bytes(vae: nn.Module, batch: int, height: int, width: int, dtype: torch.dtype) -> int:
    """Peak activation bytes of a whole (untiled) decode by ``vae`` (its codec's estimate)."""
    codec = next((c for c in CODECS if c.owns(vae)), None)
    if codec is None:
        raise ModelMismatchError(
            f"a {type(vae).__name__} is not a VAE Loadout decodes with",
            fix="Load a VAE file",
            code="wrong_vae",
        )
    return codec.decode_bytes(vae, batch, height, width, dtype)


class Pipeline:
    def __init__(
        self,
        nets: Networks,
        compute: Compute,
        *,
        clip_tokenizer: ClipTokenizer | None = None,
        t5_tokenizer: T5Tokenizer | None = None,
        cache: ConditioningCache | None = None,
        text_files: Mapping[str, Path] | None = None,
        embeddings: EmbeddingFolders = NO_EMBEDDINGS,
    ) -> None:
        """``text_files``: the file each text encoder was loaded from, by encoder family (a decoder
        LLM's tokenizer is read from or beside it)."""
        spec = diffusion_spec(nets.family)
        assert spec.text is not None  # diffusion_spec refuses a family without prompt encoding
        self.codec: LatentCodec = CODECS[spec.codec]
        if not self.codec.owns(nets.vae):
            raise ModelMismatchError(
                f"a {type(nets.vae).__name__} cannot decode a {nets.family} model's latents",
                fix="Load the VAE made for this model",
                code="wrong_vae",
            )
        f, want = self.codec.downscale(nets.vae), latent_format_for(nets.family).downscale
        if f != want:
            raise ModelMismatchError(
                f"this VAE maps {f}x{f} pixels to one latent, not {want}x{want}",
                why=f"{nets.family} models work on latents of 1/{want} the picture's size",
                fix="Load the VAE made for this model",
                code="wrong_vae",
            )
        self.nets = nets
        self.compute = compute
        self.spec = spec
        self.text_family: str = spec.text
        self.text_convention = TEXTS[spec.text]
        self.adapter = NetworkAdapter(nets.diffusion, convention=spec.network)
        self.sampling = from_spec(
            spec.sampling, nets.family, v_prediction=nets.v_prediction, zsnr=nets.zero_terminal_snr
        )
        self.latent_format = latent_format_for(nets.family)
        self.cache = cache if cache is not None else ConditioningCache()
        self._encoders: dict[int | None, PromptEncoder] = {}
        self.text_options = EncodeOptions(compute_dtype=compute.text_dtype, device=compute.device)
        self._clip_tok = clip_tokenizer
        self._t5_tok = t5_tokenizer
        self._text_files = dict(text_files or {})
        self.embeddings = embeddings
        #: the embedding files the prompts used (name as written -> file) and why any was left out
        self.used_embeddings: dict[str, str] = {}
        self.text_notes: dict[str, None] = {}

    # -- text -------------------------------------------------------------------------------------
    def _options(self, clip_skip: int | None) -> EncodeOptions:
        """A1111's clip skip N is ComfyUI's CLIPSetLastLayer -N."""
        return replace(self.text_options, clip_skip=None if clip_skip is None else -clip_skip)

    def _prompt_encoder(self, clip_skip: int | None) -> PromptEncoder:
        if clip_skip not in self._encoders:
            self._encoders[clip_skip] = PromptEncoder(
                self.text_family,
                self.nets.text,
                clip_tokenizer=self._clip_tok,
                t5_tokenizer=self._t5_tok,
                options=self._options(clip_skip),
                encoder_files=self._text_files,
                embeddings=self.embeddings,
            )
        return self._encoders[clip_skip]

    def _encode(
        self, prompt: str, hooks: Hooks, clip_skip: int | None = None, pictures: PromptPictures = NO_PICTURES,
        labels: frozenset[str] = NO_LABELS,
    ) -> PromptConditioning:  # fmt: skip
        """``pictures`` reach the towers only of a convention that reads them (and key the cache);
        ``labels``: the hook labels of the conditioning (which LoRAs' text-encoder parts it carries)."""
        if not self.text_convention.pictures:
            pictures = NO_PICTURES
        clip = hooks.clip_hooks
        text_key = (hooks.text_key if clip is None else clip.key(labels), self.embeddings.key)
        key = CacheKey(text_key, self.text_family, self._options(clip_skip), prompt, pictures.digests)
        placed = False

        def encode(text: str) -> PromptConditioning:
            nonlocal placed
            if clip is not None:
                clip.apply(labels)  # before placing: a placed copy is refreshed, a later one made so
            if not placed:
                hooks.place("text_encode")
                placed = True
            hooks.check()
            return self._prompt_encoder(clip_skip).encode(text, pictures)

        found = self.cache.get_or_encode(key, encode)
        require_finite("text encoder", found.context, found.pooled)  # float32 on the CPU: no device wait
        self.used_embeddings.update(dict(found.embeddings))
        self.text_notes.update(dict.fromkeys(found.notes))
        return found

    def _to_sampling(
        self, cond: PromptConditioning, settings: ImageSettings, *, negative: bool
    ) -> SamplingConditioning:
        adm = getattr(self.adapter.config, "adm_in_channels", None)
        guidance = settings.sampling.guidance  # none given: the family's usual (Fill: its template's 30)
        guidance = self.spec.defaults.guidance if guidance is None else guidance
        extra = ExtraInputs(settings.width, settings.height, negative, guidance, adm)
        text = TextOutput(cond.context, cond.pooled, cond.mask)
        return self.text_convention.network_inputs(text, extra)

    def encode_prompt(
        self, text: str, settings: ImageSettings, hooks: Hooks, *, negative: bool = False,
        pictures: PromptPictures = NO_PICTURES, labels: frozenset[str] = NO_LABELS,
    ) -> tuple[SamplingConditioning, tuple[str, ...]]:  # fmt: skip
        """One prompt's sampling conditioning at ``settings``' size, and the embeddings it named
        that were not found (a region's prompt is encoded as the positive prompt is); ``labels``:
        its conditioning's hook labels."""
        found = self._encode(text, hooks, settings.clip_skip, pictures, labels)
        return self._to_sampling(found, settings, negative=negative), found.missing_embeddings

    def encode_many(
        self, prompts: Sequence[tuple[str, frozenset[str], bool]], settings: ImageSettings, hooks: Hooks,
        pictures: PromptPictures = NO_PICTURES,
    ) -> list[tuple[SamplingConditioning, tuple[str, ...]]]:  # fmt: skip
        """:meth:`encode_prompt` of each (text, labels, negative), in the order given; encoded
        grouped by the text-encoder patches they carry (``hooks.clip_hooks``), so the weights
        change once per group."""
        labels = [group for _, group, _ in prompts]
        order = range(len(prompts)) if hooks.clip_hooks is None else hooks.clip_hooks.order(labels)
        out = {}
        for i in order:
            text, group, negative = prompts[i]
            out[i] = self.encode_prompt(
                text, settings, hooks, negative=negative, labels=group, pictures=pictures
            )
        return [out[i] for i in range(len(prompts))]

    def encode_prompts(
        self, settings: ImageSettings, hooks: Hooks, *, announce: bool = True,
        pictures: PromptPictures = NO_PICTURES,
    ) -> tuple[SamplingConditioning, SamplingConditioning | None, tuple[str, ...]]:  # fmt: skip
        """Both prompts' conditioning; ``pictures``: an edit's reference pictures, for a prompt
        encoding that reads them (its convention's ``pictures``)."""
        if announce:
            hooks.progress(GenerateProgress("text_encode", 0, 0, "", None, hooks.image, hooks.images))
        prompts = [(settings.prompt, frozenset({"positive"}), False)]
        # CFG 1 runs no negative pass, except for the CFG++ samplers, which step along it
        if self.cfg(settings) != 1.0 or get_sampler(settings.sampling.sampler).needs_uncond:
            prompts.append((settings.negative, frozenset({"negative"}), True))
        found = self.encode_many(prompts, settings, hooks, pictures)
        missing = tuple(dict.fromkeys(m for _, more in found for m in more))
        return found[0][0], found[1][0] if len(found) > 1 else None, missing

    def cfg(self, settings: ImageSettings) -> float:
        c = settings.sampling.cfg
        return self.spec.defaults.cfg if c is None else c

    # -- pixels <-> latents -------------------------------------------------------------------------
    def encode_image(self, rgb: np.ndarray, hooks: Hooks) -> Tensor:
        """An (H, W, 3) uint8 picture -> its latent in the VAE's space (the posterior mean), after
        cropping each side down to a multiple of 8 around the centre (ComfyUI's VAEEncode)."""
        f = self.codec.downscale(self.nets.vae)
        h, w = rgb.shape[0] // f * f, rgb.shape[1] // f * f
        if h < f or w < f:
            raise LoadoutError(
                f"the starting picture is {rgb.shape[1]}x{rgb.shape[0]} pixels, too small",
                fix=f"Use a picture of at least {f}x{f} pixels",
                code="bad_argument",
            )
        top, left = (rgb.shape[0] % f) // 2, (rgb.shape[1] % f) // 2
        crop = rgb[top : top + h, left : left + w]
        pixels = torch.from_numpy(np.ascontiguousarray(crop)).permute(2, 0, 1)[None].float() / 127.5 - 1.0
        return self.encode_pixels(pixels, hooks)

    def encode_pixels(self, pixels: Tensor, hooks: Hooks) -> Tensor:
        """Pixels (B, 3, H, W) in [-1, 1], sides multiples of 8 -> their latents (posterior means)."""
        hooks.place("decode")
        dev, dt = self.compute.device, self.compute.vae_dtype
        with torch.inference_mode():
            mean = self.codec.encode(self.nets.vae, pixels.to(dev, dt))
        return mean.float().cpu()

    def decode(self, latent: Tensor, hooks: Hooks, timings: Timings) -> Tensor:
        """VAE-space latent (B, C, h, w) -> pixels (B, 3, H, W) in [-1, 1] (float32, CPU). Whole when
        the device has room for the activations, in tiles when it does not."""
        hooks.progress(GenerateProgress("decode", 0, 0, "", None, hooks.image, hooks.images))
        hooks.place("decode")
        hooks.check()
        vae, codec, dev, dt = self.nets.vae, self.codec, self.compute.device, self.compute.vae_dtype
        b, h, w = latent.shape[0], latent.shape[-2], latent.shape[-1]
        f = codec.downscale(vae)
        need = codec.decode_bytes(vae, b, h * f, w * f, dt)
        free = hooks.free_bytes()
        tiled = free is not None and need > free
        with torch.inference_mode():
            z = latent.to(dev, dt)
            if not tiled:
                try:
                    pixels = codec.decode(vae, z)
                except torch.OutOfMemoryError:
                    tiled = True  # as ComfyUI: fall back to tiles when the whole decode does not fit
            if tiled:
                total = [0]

                def tile_done(done: int, count: int) -> None:
                    total[0] = count
                    hooks.check()
                    hooks.progress(
                        GenerateProgress("decode", done, count, "in tiles", None, hooks.image, hooks.images)
                    )

                pixels = codec.decode_tiled(vae, z, tile_done)
        timings.tiled_decode = tiled
        out = pixels.float().cpu()
        require_finite("VAE", out)  # before anything is saved: never a black picture
        return out

    # -- sampling -----------------------------------------------------------------------------------
    def sample(
        self,
        settings: ImageSettings,
        positive: SamplingConditioning,
        negative: SamplingConditioning | None,
        hooks: Hooks,
        timings: Timings,
        init_latent: Tensor | None = None,
        sampling: Sampling | None = None,
        *,
        sigmas: Tensor | None = None,
        add_noise: bool = True,
        denoise_mask: Tensor | None = None,
        patches: ModelPatches = NO_MODEL_PATCHES,
    ) -> Tensor:
        """One KSampler run (KSamplerAdvanced with ``sigmas``: the schedule's steps it runs, and
        ``add_noise``); ``denoise_mask`` (SetLatentNoiseMask, 1 = repaint) keeps the rest of the
        latent; ``patches``: what the workflows change in every model call."""
        s = sampling if sampling is not None else settings.sampling
        request = SamplingRequest(
            seed=s.seed, steps=s.steps, cfg=self.cfg(settings), sampler=s.sampler, scheduler=s.scheduler,
            denoise=s.denoise,
        )  # fmt: skip
        if init_latent is None:
            latent = empty_latent(settings.batch, settings.width, settings.height, self.latent_format)
        else:
            latent = init_latent.expand(settings.batch, -1, -1, -1).contiguous()
        last = [time.perf_counter()]
        placed = [False]

        def before_forward() -> None:
            if not placed[0]:
                hooks.place("sample")
                placed[0] = True

        def progress(p: StepProgress) -> None:
            now = time.perf_counter()
            timings.steps.append(now - last[0])
            last[0] = now
            rgb = hooks.preview.rgb(p.denoised) if hooks.preview is not None else None
            hooks.progress(GenerateProgress("sample", p.step, p.total, "", rgb, hooks.image, hooks.images))

        hooks.progress(GenerateProgress("sample", 0, s.steps, "", None, hooks.image, hooks.images))
        hooks.place("sample")
        placed[0] = True
        last[0] = time.perf_counter()
        out = sample(
            self.adapter, self.sampling, self.latent_format, latent, positive, negative, request,
            device=self.compute.device, compute_dtype=self.compute.diffusion_dtype, check=hooks.check,
            progress=progress, before_forward=before_forward, denoise_mask=denoise_mask, sigmas=sigmas,
            add_noise=add_noise, patches=patches,
        )  # fmt: skip
        require_finite("diffusion model", out)  # once per sampling run, not per step
        return out

    def run(
        self,
        settings: ImageSettings,
        hooks: Hooks,
        init: np.ndarray | None = None,
        passes: Sequence[Pass] = (),
    ) -> tuple[Tensor, Timings, tuple[str, ...]]:
        """The whole picture: pixels (B, 3, H, W) in [-1, 1], the timings, and notes. The passes the
        settings ask for that need no other model (img2img, the inpainting mask, the hires fix) are
        added to ``passes`` (ControlNets, the refiner: :mod:`core.generate.workflows`)."""
        from core.generate.passes import run_plan
        from core.generate.workflow_passes import passes_for

        return run_plan(self, settings, hooks, init, [*passes_for(settings, init), *passes])
