"""What a network's forward takes beside its inputs: the patches of this call.

Today one: ControlNet residuals a UNet adds to its skip connections and middle block
(:class:`~core.models.unet.ControlResiduals`). Patch points for attention, blocks and the model
function (issue 28, item 2) extend this record; a network that has no place for a patch it is
given refuses it in words instead of ignoring it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.errors import ModelMismatchError


@dataclass(frozen=True)
class NetPatches:
    """``control``: residuals from ControlNets for this call (None: none)."""

    control: Any = None


NO_PATCHES = NetPatches()


def refuse_control(patches: NetPatches, network: str) -> None:
    """For a network with no place for ControlNet residuals: a refusal, never a silent ignore."""
    if patches.control is not None:
        raise ModelMismatchError(
            f"ControlNets cannot be applied to the {network} network",
            why="it has no place where a ControlNet's residuals are added",
            fix="Leave the ControlNets out for this model",
            code="wrong_controlnet",
        )
