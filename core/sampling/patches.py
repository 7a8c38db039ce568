"""What a feature may change in one KSampler run, typed: ComfyUI's ``model_function_wrapper``,
``sampler_cfg_function``, sampler callbacks and ``c_concat``, with the network's own patch points
(:mod:`core.models.patches`) beside them.

* a **model wrapper** ``(call, apply) -> prediction`` runs around every network call: it sees the
  network's input, timestep, conditioning and sigma, and calls ``apply`` (the next wrapper, then
  the network) with a changed call, for instance with more network patches (a ControlNet computes
  its residuals from the call and hands them on as the UNet's block and join patches);
* **extra inputs** ``(x) -> channels`` are appended to the network's input after every wrapper ran
  (an inpainting model's mask and masked-picture latent);
* the **CFG stages** (ComfyUI's ``sampler_pre_cfg_function``, ``sampler_cfg_function`` and
  ``sampler_post_cfg_function``), each told the sampler's latent, sigma, both predictions and the
  scale in a :class:`CfgCall`: **pre-CFG** functions change the two predictions before they are
  combined (APG), one **guidance** function replaces CFG's combination (RescaleCFG), **post-CFG**
  functions change the combined result (CFG-Zero*, PAG, SLG, Epsilon Scaling) and may run the
  network once more, on either prompt, with more network patches (:class:`Predict`);
* **step callbacks** are told every finished step;
* **conditioning entries** (ComfyUI's cond lists: regions with their areas, masks, strengths and
  step ranges, :mod:`core.sampling.cond_entry`) are weighed beside each side's own prompt
  (:mod:`core.sampling.cond_batch`); **hook labels** put a side's entries in a hook group (LoRAs
  on one prompt only), which a model wrapper reads from :attr:`ModelCall.hooks`.

Wrappers run outermost first; every other field adds up in order (``+``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import torch
from torch import Tensor

from core.errors import LoadoutError
from core.models.patches import NO_PATCHES, NetworkPatches
from core.sampling.cond_entry import CondEntry
from core.sampling.conditioning import Conditioning


@dataclass(frozen=True)
class ModelCall:
    """One network call: ``x`` the network's input (``calculate_input(sigma, x)``) in the compute
    dtype, float32 ``timestep`` [B], the batch's conditioning, ``sigma`` [B], the network's patches
    and the batch's hook group (:class:`core.sampling.cond_entry.CondEntry`; every item of one
    call has the same)."""

    x: Tensor
    timestep: Tensor
    cond: Conditioning
    sigma: Tensor
    patches: NetworkPatches = NO_PATCHES
    hooks: frozenset[str] = field(default_factory=frozenset)

    def with_patches(self, more: NetworkPatches) -> ModelCall:
        return replace(self, patches=self.patches + more)


Apply = Callable[[ModelCall], Tensor]
ModelWrapper = Callable[[ModelCall, Apply], Tensor]
ExtraInputs = Callable[[Tensor], Tensor]


class Predict(Protocol):
    """The network run once more at this sigma: on the positive prompt (the negative with
    ``negative``), at the sampler's latent (or ``x``), with ``patches`` added; its estimate of the
    clean latent. On the negative where the run has no negative prompt: None."""

    def __call__(
        self, patches: NetworkPatches, *, x: Tensor | None = None, negative: bool = False
    ) -> Tensor | None: ...


@dataclass(frozen=True)
class CfgCall:
    """One combination of the two predictions: ``x`` the sampler's latent (ComfyUI's ``input``),
    ``sigma`` [B], ``cond`` and ``uncond`` the positive's and the negative's estimates of the clean
    latent (``uncond`` zeros where the negative was not run, as ComfyUI at CFG 1), the CFG
    ``scale``; ``predict`` runs the network once more (:class:`Predict`)."""

    x: Tensor
    sigma: Tensor
    cond: Tensor
    uncond: Tensor
    scale: float
    predict: Predict

    def predict_positive(self, patches: NetworkPatches) -> Tensor:
        """The positive prompt's estimate at ``x`` with ``patches`` added."""
        out = self.predict(patches)
        assert out is not None  # the positive prompt is always there
        return out

    def with_predictions(self, cond: Tensor, uncond: Tensor) -> CfgCall:
        return CfgCall(self.x, self.sigma, cond, uncond, self.scale, self.predict)

    def cfg(self) -> Tensor:
        """Plain CFG: ``uncond + (cond - uncond) * scale``."""
        return self.uncond + (self.cond - self.uncond) * self.scale


PreCfg = Callable[[CfgCall], CfgCall]
Guidance = Callable[[CfgCall], Tensor]
PostCfg = Callable[[CfgCall, Tensor], Tensor]


@dataclass(frozen=True)
class StepInfo:
    """A finished step: ``step`` of ``total``, its sigma and its estimate of the clean latent."""

    step: int
    total: int
    sigma: Tensor
    denoised: Tensor


StepCallback = Callable[[StepInfo], None]


@dataclass(frozen=True)
class ModelPatches:
    wrappers: tuple[ModelWrapper, ...] = ()
    network: NetworkPatches = NO_PATCHES
    extra_inputs: tuple[ExtraInputs, ...] = ()
    guidance: Guidance | None = None
    steps: tuple[StepCallback, ...] = ()
    pre_cfg: tuple[PreCfg, ...] = ()
    post_cfg: tuple[PostCfg, ...] = ()
    #: more entries of the positive prompt's and of the negative prompt's conditioning lists
    positive_conds: tuple[CondEntry, ...] = ()
    negative_conds: tuple[CondEntry, ...] = ()
    #: hook labels every entry of the positive's (the negative's) list carries (ComfyUI's
    #: ConditioningSetProperties ``hooks`` on a prompt's whole conditioning list)
    positive_hooks: frozenset[str] = frozenset()
    negative_hooks: frozenset[str] = frozenset()
    #: the entries' own hook labels some LoRA acts on (a region's); the others are dropped, so an
    #: entry no LoRA is on batches as before
    hook_labels: frozenset[str] = frozenset()

    def __add__(self, other: ModelPatches) -> ModelPatches:
        if self.guidance is not None and other.guidance is not None:
            raise LoadoutError(
                "two features both replace classifier-free guidance",
                why="one guidance function combines the positive and negative predictions",
                fix="Use one of them",
                code="bad_argument",
            )
        return ModelPatches(
            self.wrappers + other.wrappers,
            self.network + other.network,
            self.extra_inputs + other.extra_inputs,
            self.guidance or other.guidance,
            self.steps + other.steps,
            self.pre_cfg + other.pre_cfg,
            self.post_cfg + other.post_cfg,
            self.positive_conds + other.positive_conds,
            self.negative_conds + other.negative_conds,
            self.positive_hooks | other.positive_hooks,
            self.negative_hooks | other.negative_hooks,
            self.hook_labels | other.hook_labels,
        )

    @property
    def changes_cfg(self) -> bool:
        return self.guidance is not None or bool(self.pre_cfg) or bool(self.post_cfg)

    def run(self, call: ModelCall, network: Apply) -> Tensor:
        """The call through every wrapper (outermost first), the extra inputs, then ``network``."""

        def innermost(c: ModelCall) -> Tensor:
            if not self.extra_inputs:
                return network(c)
            x = torch.cat([c.x, *(extra(c.x) for extra in self.extra_inputs)], dim=1)
            return network(replace(c, x=x))

        apply: Apply = innermost
        for wrapper in reversed(self.wrappers):
            apply = _wrapped(wrapper, apply)
        return apply(call.with_patches(self.network) if self.network != NO_PATCHES else call)


def _wrapped(wrapper: ModelWrapper, inner: Apply) -> Apply:
    def apply(call: ModelCall) -> Tensor:
        return wrapper(call, inner)

    return apply


NO_MODEL_PATCHES = ModelPatches()
