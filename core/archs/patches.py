"""What a network's forward takes beside its inputs: the patches of this call.

One type only: :class:`core.models.patches.NetworkPatches` (block, join and attention patches at
the points a network declares with ``patch_points()``). A network that declares no points
refuses any patch it is given in words (:func:`refuse_patches`) instead of ignoring it.
"""

from __future__ import annotations

from core.errors import ModelMismatchError
from core.models.patches import NO_PATCHES, NetworkPatches

__all__ = ["NO_PATCHES", "NetworkPatches", "refuse_patches"]


def refuse_patches(patches: NetworkPatches, network: str) -> None:
    """For a network with no patch points: a refusal, never a silent ignore."""
    if patches != NO_PATCHES:
        raise ModelMismatchError(
            f"this control feature cannot be applied to the {network} network",
            why="the network has no patch points where the feature would change its forward pass",
            fix="Leave the control features (ControlNets ...) out for this model",
            code="wrong_controlnet",
        )
