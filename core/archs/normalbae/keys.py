"""Where each weight of :class:`~.net.NormalBae` lives in a file: under the network's own names, as
``scannet.pt``'s ``model`` dict holds them (``encoder.original_model.blocks.3.2.conv_dw.weight``,
``decoder.up1._net.0.weight``; layout ``original``), or the same under ``module.`` (layout
``data_parallel``: a state dict saved from a ``DataParallel`` wrapper, whose prefix the reference's
loader strips). Every batch norm's ``num_batches_tracked`` and the encoder head's batch norm
(``bn2``, whose output NormalBAE never takes) are in the file and unused."""

from __future__ import annotations

from collections.abc import Mapping

from core.archs.normalbae.encoder import EncoderConfig, Stage
from core.archs.normalbae.net import NormalBaeConfig

Shapes = Mapping[str, tuple[int, ...]]
Source = tuple[str, int | None]
PREFIX = {"original": "", "data_parallel": "module."}
ENCODER = "encoder.original_model."


def _unused(key: str, layout: str) -> bool:
    return key.endswith(".num_batches_tracked") or key.startswith(f"{PREFIX[layout]}{ENCODER}bn2.")


def config_from_shapes(shapes: Shapes, layout: str) -> NormalBaeConfig:
    """The network a file holds, from its shapes (KeyError when it is not complete)."""
    enc = f"{PREFIX[layout]}{ENCODER}"
    stages: list[Stage] = []
    while f"{enc}blocks.{len(stages)}.0.conv_dw.weight" in shapes:
        s = f"{enc}blocks.{len(stages)}."
        blocks = 1
        while f"{s}{blocks}.conv_dw.weight" in shapes:
            blocks += 1
        kernel = shapes[f"{s}0.conv_dw.weight"][-1]
        if f"{s}0.conv_pwl.weight" in shapes:
            mid, cin = shapes[f"{s}0.conv_pw.weight"][:2]
            width = shapes[f"{s}0.conv_pwl.weight"][0]
            expand = round(mid / cin)
        else:
            width, expand = shapes[f"{s}0.conv_pw.weight"][0], 1
        stages.append(Stage(blocks, kernel, width, expand))
    if len(stages) != 7:
        raise ValueError(f"the encoder has {len(stages)} stages of blocks, not EfficientNet's 7")
    encoder = EncoderConfig(
        stem=shapes[f"{enc}conv_stem.weight"][0],
        stages=tuple(stages),
        head=shapes[f"{enc}conv_head.weight"][0],
    )
    dec = f"{PREFIX[layout]}decoder."
    ups = tuple(shapes[f"{dec}up{i}._net.0.weight"][0] for i in range(1, 5))
    return NormalBaeConfig(
        encoder=encoder,
        features=shapes[f"{dec}conv2.weight"][0],
        ups=(ups[0], ups[1], ups[2], ups[3]),
        refine=shapes[f"{dec}out_conv_res1.0.weight"][0],
    )


def sources(cfg: NormalBaeConfig, layout: str, module_keys: list[str]) -> dict[str, Source]:
    """Module key -> (file key, None) for every key of the module."""
    return {k: (f"{PREFIX[layout]}{k}", None) for k in module_keys}


def file_shapes_as_module(
    shapes: Shapes, mapped: Mapping[str, Source], layout: str
) -> dict[str, tuple[int, ...]]:
    """The file's shapes under the module's names, plus the file keys no source names (less the
    unused ones) under their own names, for the key-by-key comparison."""
    out = {mine: tuple(shapes[key]) for mine, (key, _part) in mapped.items() if key in shapes}
    used = {key for key, _part in mapped.values()}
    return out | {k: tuple(s) for k, s in shapes.items() if k not in used and not _unused(k, layout)}
