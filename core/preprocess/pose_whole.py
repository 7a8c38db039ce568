"""Pose maps with hands and faces, as controlnet_aux's ``OpenposeDetector`` makes them with
``include_hand`` / ``include_face`` (sd-webui-controlnet's ``openpose_full``, ``openpose_hand``,
``openpose_face``, ``openpose_faceonly``): the people found by the body network as for
:func:`core.preprocess.pose.pose_map`, each one's hands and face found by the hand and face networks
in boxes placed from its body (:mod:`core.preprocess.pose_hands`), then each person drawn in turn on
black: its skeleton (unless faces only), its left hand, its right hand, its face
(:mod:`core.preprocess.pose_draw`). The map is drawn at the resolution's size and resized back to
the picture's, as the body-only map is.

The placed networks come as one ``nn.ModuleDict`` by family id (``openpose-body``,
``openpose-hand``, ``openpose-face``), as :func:`core.preprocess.placed.model_run` hands them over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from core.preprocess import pose, pose_draw, pose_hands

BODY, HAND, FACE = "openpose-body", "openpose-hand", "openpose-face"
#: the size the hand and face networks see at most (the largest of the hand's four scales)
HAND_INPUT = (736, 736)
FACE_INPUT = (pose_hands.FACE_SIZE, pose_hands.FACE_SIZE)

ModelHint = Callable[
    [nn.Module, np.ndarray, Mapping[str, float], torch.device, Callable[[], None]], np.ndarray
]


@dataclass(frozen=True)
class WholePerson:
    """A person's body parts (in the detection picture's pixels), hands and face (0..1, -1 where
    missing; None: not looked for or not found)."""

    body: pose_hands.PixelPerson
    left: pose_hands.Keypoints | None = None
    right: pose_hands.Keypoints | None = None
    face: pose_hands.Keypoints | None = None


def find_whole(
    models: nn.ModuleDict, bgr: np.ndarray, device: torch.device, check: Callable[[], None], *,
    hands: bool, face: bool,
) -> list[WholePerson]:  # fmt: skip
    """The people in an (H, W, 3) uint8 BGR picture, with their hands and faces if asked."""
    out = []
    for person in pose.people_in_pixels(models[BODY], bgr, device, check):
        left, right = pose_hands.hands_of(models[HAND], person, bgr, device, check) if hands else (None, None)
        points = pose_hands.face_of(models[FACE], person, bgr, device, check) if face else None
        out.append(WholePerson(person, left, right, points))
    return out


def draw_whole(people: list[WholePerson], height: int, width: int, *, body: bool = True) -> np.ndarray:
    """Each person in turn on a black (height, width, 3) uint8 canvas: the skeleton (``body``),
    the left hand, the right hand, the face."""
    canvas = np.zeros((height, width, 3), np.uint8)
    for p in people:
        if body:
            pose.draw_body(canvas, pose.normalised(p.body, height, width))
        pose_draw.draw_hands(canvas, [pose_hands.in_pixels(h, height, width) for h in (p.left, p.right)])
        pose_draw.draw_face(canvas, [pose_hands.in_pixels(p.face, height, width)])
    return canvas


def whole_map(*, body: bool = True, hands: bool = False, face: bool = False) -> ModelHint:
    """The map maker of a preprocessor that draws the bodies (``body``), hands and faces."""

    def run(
        models: nn.Module, picture: np.ndarray, settings: Mapping[str, float], device: torch.device,
        check: Callable[[], None] = lambda: None,
    ) -> np.ndarray:  # fmt: skip
        assert isinstance(models, nn.ModuleDict)
        small = pose.resized(picture, int(settings["resolution"]))
        found = find_whole(
            models, np.ascontiguousarray(small[:, :, ::-1]), device, check, hands=hands, face=face
        )
        return pose.resized_back(draw_whole(found, small.shape[0], small.shape[1], body=body), picture)

    return run
