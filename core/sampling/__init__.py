"""Sampling: ComfyUI's KSampler re-designed (model sampling, schedulers, samplers, noise, CFG).

The same model, prompt, seed, sampler, scheduler, steps and CFG give the same latent as ComfyUI's
KSampler on an Empty Latent Image (fp32, CPU). Entry point: :func:`sample`. See
``docs/sampling.md``.
"""

from core.detect.catalog import latent_format_for
from core.detect.spec import LatentFormat
from core.sampling.cfg import CfgDenoiser
from core.sampling.conditioning import Conditioning
from core.sampling.denoiser import Denoiser, DiffusionModel, ModelDenoiser
from core.sampling.ksampler import SamplingRequest, StepProgress, empty_latent, is_max_denoise, sample
from core.sampling.model_sampling import ModelSampling, for_family
from core.sampling.noise import BrownianNoise, GaussianNoise, initial_noise
from core.sampling.samplers import SAMPLERS, SamplerOptions, SamplerSpec, get_sampler
from core.sampling.schedulers import SCHEDULERS
from core.sampling.sigmas import ksampler_sigmas

__all__ = [
    "SAMPLERS",
    "SCHEDULERS",
    "BrownianNoise",
    "CfgDenoiser",
    "Conditioning",
    "Denoiser",
    "DiffusionModel",
    "GaussianNoise",
    "LatentFormat",
    "ModelDenoiser",
    "ModelSampling",
    "SamplerOptions",
    "SamplerSpec",
    "SamplingRequest",
    "StepProgress",
    "empty_latent",
    "for_family",
    "get_sampler",
    "initial_noise",
    "is_max_denoise",
    "ksampler_sigmas",
    "latent_format_for",
    "sample",
]
