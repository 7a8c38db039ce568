"""What an SD3 ControlNet adds to one MMDiT call: ComfyUI's ``control["output"]``, one residual (or
None) per joint block, added to the picture's tokens after that block (``x += add`` for every block
``i < len(output)``; a longer list than the network's blocks is cut, a shorter one leaves the last
blocks alone). Several ControlNets add up position by position, as ComfyUI's ``control_merge``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor

from core.errors import ModelMismatchError
from core.models.patches import NetworkPatches, Site


@dataclass(frozen=True)
class JointResiduals:
    """Residuals for the joint blocks, in order. The same tensor may stand at several positions (a
    ControlNet with fewer blocks than its base network repeats each block's output)."""

    outputs: tuple[Tensor | None, ...]

    @classmethod
    def repeated(cls, per_block: Sequence[Tensor], counts: Sequence[int]) -> JointResiduals:
        """Block ``i``'s output ``counts[i]`` times over, in block order."""
        out: list[Tensor | None] = []
        for tensor, count in zip(per_block, counts, strict=True):
            out += [tensor] * max(count, 0)
        return cls(tuple(out))

    def scaled(self, strength: float) -> JointResiduals:
        """Each residual times ``strength``; a tensor shared by several positions is scaled once
        and stays shared (ComfyUI scales shared tensors once, in place)."""
        done: dict[int, Tensor] = {}
        out: list[Tensor | None] = []
        for t in self.outputs:
            if t is not None:
                t = done.setdefault(id(t), t * strength)
            out.append(t)
        return JointResiduals(tuple(out))

    def merged(self, later: object) -> JointResiduals:
        """This (earlier) sum and a later net's, position by position (``earlier + later``); where
        one list is longer, its own residuals stand alone."""
        if not isinstance(later, JointResiduals):
            raise _mismatch("an SD3 ControlNet was stacked with a ControlNet of another network")
        out = list(later.outputs)
        for i, prev in enumerate(self.outputs):
            if i >= len(out):
                out.append(prev)
            elif prev is not None:
                now = out[i]
                out[i] = prev if now is None else prev + now
        return JointResiduals(tuple(out))

    def patches(self) -> NetworkPatches:
        return NetworkPatches(blocks=(self._after_block,))

    def _after_block(self, h: Tensor, site: Site) -> Tensor:
        if site.stage != "joint" or site.index >= len(self.outputs):
            return h
        add = self.outputs[site.index]
        if add is None:
            return h
        if add.shape != h.shape:
            raise _mismatch(
                f"it gives a {list(add.shape)} residual where the network's picture tokens are "
                f"{list(h.shape)}"
            )
        return (h + add).to(h.dtype)  # as ComfyUI's in-place ``x += add``

    def nbytes(self) -> int:
        """Bytes the distinct residual tensors hold."""
        unique = {id(t): t for t in self.outputs if t is not None}
        return sum(t.numel() * t.element_size() for t in unique.values())


def _mismatch(why: str) -> ModelMismatchError:
    return ModelMismatchError(
        "the ControlNet does not fit this diffusion model",
        why=why,
        fix="Use a ControlNet made for the loaded SD3 / SD3.5 model (docs/families.md)",
        code="wrong_controlnet",
    )


def residual_bytes(blocks: int, hidden: int, batch: int, tokens: int, element: int) -> int:
    """What ``blocks`` distinct (batch, tokens, hidden) residuals take."""
    return blocks * batch * tokens * hidden * element


__all__ = ["JointResiduals", "residual_bytes"]
