"""The edge preprocessors on a real (drawn) picture: where its shapes' edges are, there are strokes;
flat areas stay black; the settings do what they say; bad input is refused in words."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from core.errors import LoadoutError
from core.preprocess import PREPROCESSORS, UnknownPreprocessorError, preprocess, preprocessor_named
from tests.fixtures.drawn import landscape

W, H = 192, 128


@pytest.fixture(scope="module")
def picture(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    path = landscape(tmp_path_factory.mktemp("pre") / "house.png", W, H)
    return np.asarray(Image.open(path).convert("RGB"))


# the house's wall (x 0.18-0.36 W, y 0.5-0.78 H, outlined): its left edge column and its flat inside
WALL_LEFT = round(W * 0.18)
WALL_INSIDE = (slice(round(H * 0.58), round(H * 0.72)), slice(round(W * 0.22), round(W * 0.32)))
SKY = (slice(2, 10), slice(2, 30))  # a smooth gradient, no edge


def _strokes(hint: np.ndarray) -> np.ndarray:
    assert hint.shape == (H, W, 3) and hint.dtype == np.uint8
    assert np.array_equal(hint[..., 0], hint[..., 1]) and np.array_equal(hint[..., 0], hint[..., 2])
    return hint[..., 0]


@pytest.mark.parametrize("name", [n for n, p in PREPROCESSORS.items() if p.run is not None])
def test_edges_are_on_the_shapes_and_flat_areas_stay_black(picture: np.ndarray, name: str) -> None:
    s = _strokes(preprocess(name, picture))
    rows = slice(round(H * 0.55), round(H * 0.75))
    near_wall = s[rows, WALL_LEFT - 2 : WALL_LEFT + 3]
    assert (near_wall.max(axis=1) > 60).all()  # every row of the wall's left edge has a stroke
    inside = s[WALL_INSIDE]
    assert inside.max() == 0 if name != "softedge" else inside.max() < 10
    assert s[SKY].max() < 30
    assert s.max() == 255


def test_canny_is_binary_and_higher_thresholds_keep_fewer_edges(picture: np.ndarray) -> None:
    low = _strokes(preprocess("canny", picture, {"low": 20, "high": 40}))
    high = _strokes(preprocess("canny", picture, {"low": 200, "high": 400}))
    assert set(np.unique(low)) <= {0, 255}
    assert np.count_nonzero(high) < np.count_nonzero(low)
    assert not np.any(high & ~low)  # what the strict thresholds keep, the loose ones keep too


def test_lineart_lines_widen_with_sigma(picture: np.ndarray) -> None:
    thin = np.count_nonzero(_strokes(preprocess("lineart", picture, {"sigma": 0.7})))
    wide = np.count_nonzero(_strokes(preprocess("lineart", picture, {"sigma": 3.0})))
    assert wide > 1.5 * thin


def test_a_flat_picture_has_no_edges() -> None:
    flat = np.full((64, 64, 3), 128, np.uint8)
    for name, record in PREPROCESSORS.items():
        if record.run is not None:
            assert preprocess(name, flat).max() == 0


def test_bad_input_is_refused_in_words(picture: np.ndarray, tmp_path: Path) -> None:
    names = "canny, lineart, softedge, depth, normal, openpose, openpose_full.*, dwpose"
    with pytest.raises(UnknownPreprocessorError, match=names):
        preprocess("hed", picture)
    with pytest.raises(LoadoutError, match="needs a Depth Anything V2 model file"):
        preprocess("depth", picture)
    # sd-webui-controlnet's module name (what an A1111 PNG says) is the same preprocessor
    assert preprocessor_named("depth_anything_v2") == "depth" and preprocessor_named("hed") is None
    with pytest.raises(LoadoutError, match="no setting"):
        preprocess("canny", picture, {"lo": 3})
    with pytest.raises(LoadoutError, match="out of range"):
        preprocess("canny", picture, {"low": -1})
    with pytest.raises(LoadoutError, match="RGB picture"):
        preprocess("canny", picture[..., 0])
