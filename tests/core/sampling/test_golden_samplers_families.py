"""The other families' runs of ComfyUI's other 31 KSampler samplers against its KSampler: SD2-v,
SD3 (flow: the rectified-flow ancestral forms and the logit half-log-SNR), Flux-dev at CFG 1 (the
CFG++ samplers still evaluate the negative), img2img at denoise 0.6 on SD1 and SD3, and masked
inpainting with the CFG++ samplers. How the
goldens were made: ``test_golden_samplers_more.py``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.core.sampling.test_golden_samplers_more import ALL, run_case

CASES = [c for c in ALL if not (c["family"] == "sd1" and c["latent"] == "empty")]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_matches_comfyui(case: dict[str, Any]) -> None:
    run_case(case)


def test_every_case_runs_in_one_of_the_two_files() -> None:
    from tests.core.sampling.test_golden_samplers_more import CASES as SD1

    assert len(SD1) + len(CASES) == len(ALL)
