"""Sampler and scheduler names in A1111's spelling (the infotext's ``Sampler`` and ``Schedule
type``), and back into ComfyUI's names, which Loadout uses everywhere else."""

from __future__ import annotations

#: ComfyUI sampler name -> A1111's display name.
SAMPLER_LABELS: dict[str, str] = {
    "euler": "Euler",
    "euler_ancestral": "Euler a",
    "heun": "Heun",
    "dpm_2": "DPM2",
    "dpm_2_ancestral": "DPM2 a",
    "dpmpp_2m": "DPM++ 2M",
    "dpmpp_2m_sde": "DPM++ 2M SDE",
    "dpmpp_sde": "DPM++ SDE",
    "dpmpp_2s_ancestral": "DPM++ 2S a",
    "dpmpp_2m_sde_heun": "DPM++ 2M SDE Heun",
    "dpmpp_3m_sde": "DPM++ 3M SDE",
    "lms": "LMS",
    "dpm_fast": "DPM fast",
    "dpm_adaptive": "DPM adaptive",
    "lcm": "LCM",
    "ddim": "DDIM",
    "uni_pc": "UniPC",
}
#: ComfyUI scheduler name -> A1111's "Schedule type".
SCHEDULER_LABELS: dict[str, str] = {
    "normal": "Normal",
    "karras": "Karras",
    "exponential": "Exponential",
    "sgm_uniform": "SGM Uniform",
    "simple": "Simple",
    "beta": "Beta",
    "ddim_uniform": "DDIM",
    "kl_optimal": "KL Optimal",
}
SAMPLER_NAMES = {v.lower(): k for k, v in SAMPLER_LABELS.items()}
SCHEDULER_NAMES = {v.lower(): k for k, v in SCHEDULER_LABELS.items()}
# A1111 also folds the schedule into the sampler label ("DPM++ 2M Karras") in older images.
FOLDED_SCHEDULES = {"karras": "karras", "exponential": "exponential", "sgm uniform": "sgm_uniform"}
