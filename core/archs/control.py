"""What a ControlNet is to the engine, whatever network it steers.

A ControlNet (lllyasviel's for the UNets, the DiT ControlNets of SD3.5, FLUX.1, Qwen-Image, the
model patches of Z-Image Fun) is a :class:`ControlModule`: an ``nn.Module`` the memory manager
places with the diffusion model, which looks at one network call (:class:`ControlInput`) and its
hint and gives a :class:`ControlOutput`, what it adds to that call, as the base network's patches
(:mod:`core.models.patches`). The base network knows nothing of ControlNets.

Two hint spaces, as ComfyUI's ``ControlNet.get_control``:

* ``"pixels"``: the hint picture, centre-cropped and resized (``nearest-exact``) to the latent's
  size in pixels, ``(1, C, H, W)`` in [0, 1] (the UNet ControlNets, XLabs' Flux ones);
* ``"latent"``: that picture VAE-encoded by the base model's VAE and put into its latent space
  (``latent_format.process_in``), ``(1, C, h, w)`` at the call's latent size (SD3.5, InstantX,
  Qwen-Image, Z-Image Fun). The pass encodes it before each sampler stage, at the stage's size.

A package that brings ControlNets for its family exports ``CONTROLNETS``, a tuple of
:class:`ControlNetLoader` records (:data:`core.archs.catalog.CONTROLNETS`), and names the files'
detection families in ``core.detect.catalog.CONTROLNETS_FOR`` (which models they fit); the UNet
ControlNets load through :mod:`core.loading.controlnet` directly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from torch import Tensor

from core.archs.conditioning import Conditioning
from core.models.patches import NetworkPatches, PatchPoints

if TYPE_CHECKING:
    from torch import nn

    from core.archs.keymaps import KeyMapping
    from core.detect.spec import LatentFormat
    from core.detect.types import Detection

HintSpace = Literal["pixels", "latent"]


@dataclass(frozen=True)
class ControlInput:
    """One network call as a ControlNet sees it: ``x`` the base network's input latent ``(B, C, h,
    w)`` in the compute dtype (before an inpainting model's extra channels), ``timestep`` the model
    timestep ``[B]`` the base network takes, ``cond`` the batch's conditioning (context, pooled,
    guidance, mask), ``sigma`` ``[B]``, and ``hint`` in the module's :data:`HintSpace` (batch 1:
    the module repeats it to the call's batch)."""

    x: Tensor
    timestep: Tensor
    cond: Conditioning
    sigma: Tensor
    hint: Tensor
    #: the union ControlNets' control type (ComfyUI's ``SetUnionControlNetType``); None: not set
    control_type: int | None = None


@runtime_checkable
class ControlOutput(Protocol):
    """What one ControlNet (or the sum of several) adds to one network call."""

    def scaled(self, strength: float) -> ControlOutput:
        """Every residual times ``strength`` (ComfyUI's ``control_merge``: ``x *= strength``)."""
        ...

    def merged(self, later: ControlOutput) -> ControlOutput:
        """This output and a later net's, added position by position (ComfyUI's ``control_merge``:
        the earlier sum plus the next net's). Outputs that cannot be added (a lazy model patch)
        may apply one after the other instead."""
        ...

    def patches(self) -> NetworkPatches:
        """The output as the base network's patches."""
        ...


class ControlModule(Protocol):
    """A ControlNet's network (an ``nn.Module``), for the families ``fits`` names."""

    hint_space: HintSpace

    def control(self, inp: ControlInput) -> ControlOutput:
        """The unscaled output for one call."""
        ...

    def require_points(self, points: PatchPoints) -> None:
        """Refuse in words a base network without the patch points the output goes to."""
        ...

    def residual_bytes(self, batch: int, height: int, width: int, element: int) -> int:
        """Bytes its output holds beside the base network's activations for a latent of
        ``height x width`` cells and ``batch`` items of ``element`` bytes."""
        ...


@runtime_checkable
class MaskedHint(Protocol):
    """A ControlNet whose hint carries an inpainting mask (ComfyUI's ``concat_mask``: InstantX's
    Qwen-Image inpainting net): ``mask_hint`` True, the pass blacks the picture out where it is
    repainted before encoding it and adds the kept part (1 kept, 0 repainted, ``nearest-exact`` at
    the latent's size) as one more hint channel after the latent's (ComfyUI's ``extra_concat``)."""

    @property
    def mask_hint(self) -> bool: ...


@dataclass(frozen=True)
class InpaintHint:
    """The picture to inpaint as a latent-space ControlNet's hint takes it (Z-Image Fun 2.x),
    sized by the pass: ``picture`` (1, 3, H, W) in [0, 1] at the latent's size in pixels (the
    module's ``hint_resize``); ``keep_pixels`` (1, 1, H, W) the kept part (1 kept, 0 repainted) at
    that size (``bilinear``, centre) and rounded; ``keep_cells`` (1, 1, h, w) the kept part at the
    latent's size (the module's ``mask_resize``, centre)."""

    picture: Tensor
    keep_pixels: Tensor
    keep_cells: Tensor


@runtime_checkable
class MakesLatentHint(Protocol):
    """A latent-space ControlNet that makes its hint itself from the resized control picture and
    ``encode`` (pixels in [0, 1] -> the base model's latent space). ``inpaint_inputs`` True: the
    hint also carries the picture to inpaint and its mask (ComfyUI's ``ZImageFunControlnet``
    ``inpaint_image`` and ``mask``), given as ``inpaint`` when the generation repaints part of its
    picture (None: nothing to inpaint). With inpaint inputs the control picture may be left out
    (``picture`` None: ComfyUI's node without an ``image``) when there is a picture to inpaint."""

    @property
    def inpaint_inputs(self) -> bool: ...

    mask_resize: str

    def latent_hint(
        self, picture: Tensor | None, encode: Callable[[Tensor], Tensor], inpaint: InpaintHint | None = None
    ) -> Tensor: ...


@runtime_checkable
class MakesMaskedHint(Protocol):
    """A :class:`MaskedHint` net that makes its masked hint its own way (DiffSynth's blockwise
    Qwen-Image inpainting net: the picture encoded as given, the kept part resized ``bilinear``
    without a crop): ``pixels`` the picture resized as any latent hint, ``keep`` (1, 1, H, W) the
    kept part at the picture's size (None: nothing repainted), ``encode`` pixels in [0, 1] -> the
    base model's latent space."""

    def masked_latent_hint(
        self, pixels: Tensor, keep: Tensor | None, encode: Callable[[Tensor], Tensor]
    ) -> Tensor: ...


@runtime_checkable
class ShapesLatentHint(Protocol):
    """A latent-space ControlNet whose hint is made its own way (ComfyUI's ``preprocess_image`` and
    a latent format of its own): ``hint_pixels`` changes the resized picture ([0, 1], before the
    VAE's ``x * 2 - 1``), ``hint_latent`` puts the VAE's latent into the net's space (instead of
    the base model's ``latent_format.process_in``)."""

    def hint_pixels(self, pixels: Tensor) -> Tensor: ...

    def hint_latent(self, encoded: Tensor, latent_format: LatentFormat) -> Tensor: ...


@runtime_checkable
class BorrowsBase(Protocol):
    """A ControlNet that runs with some of its base network's own weights (not in its file: SD3.5
    Large's ControlNets embed the latent with the base MMDiT's ``x_embedder``, as ComfyUI's
    ``ControlNetSD35.pre_run`` copies it). Called once per generation, before sampling; refuses
    in words a base network without them."""

    def take_from_base(self, network: nn.Module) -> None: ...


#: ``build(shapes, detection)``: the module on the meta device for a file whose tensors have these
#: shapes (key -> shape); a ``ValueError`` / ``KeyError`` says why the file is not one
BuildControl = Callable[[Mapping[str, tuple[int, ...]], "Detection"], ControlModule]
#: ``key_map(module)``: the module's state-dict key -> the file's key (None: the same names), or the
#: file's keys whose tensors are concatenated along dim 0 to make it (diffusers' separate q, k, v)
ControlKeys = Callable[[Any], Mapping[str, str | tuple[str, ...]]]
#: ``key_rows(module)``: the file tensors each module tensor is made of, as the diffusion models'
#: key rows (a fused ``qkv`` from diffusers' ``to_q``/``to_k``/``to_v``); used instead of ``key_map``
ControlKeyRows = Callable[[Any], "tuple[KeyMapping, ...] | None"]


@dataclass(frozen=True)
class ControlNetLoader:
    """An architecture package's ControlNet kind, loaded by :mod:`core.loading.controlnet` (built on
    the meta device, the file's layout compared key by key before any data is read, then filled
    zero-copy from the mapped file): ``id``; ``families`` the diffusion families detection names
    for its files (``Detection.family`` of a ``controlnet``); ``layouts`` the detection layouts it
    loads (empty: any)."""

    id: str
    families: tuple[str, ...]
    build: BuildControl
    key_map: ControlKeys | None = None
    layouts: tuple[str, ...] = ()
    #: for layouts that split a module tensor in several (None from it: ``key_map`` applies)
    key_rows: ControlKeyRows | None = None
    #: union ControlNets: the control types by name, in the file's index order
    control_types: tuple[str, ...] = ()
    #: its files may run with no control picture while inpainting (the picture to inpaint and its
    #: mask alone: Z-Image Fun 2.x); some of them may not (loading tells)
    inpaints_alone: bool = False

    def accepts(self, family: str | None, layout: str | None) -> bool:
        return family in self.families and (not self.layouts or layout in self.layouts)
