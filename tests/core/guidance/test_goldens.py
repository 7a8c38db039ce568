"""Each guidance patch's math against ComfyUI's node code: the goldens were computed outside the
repository by a scratch script that re-implements the nodes literally from ComfyUI's source
(``nodes_model_advanced.py`` RescaleCFG, ``nodes_cfg.py`` CFGZeroStar, ``nodes_apg.py``,
``nodes_eps.py``, ``nodes_freelunch.py``, ``nodes_model_downscale.py``, ``nodes_pag.py``,
``nodes_slg.py``) on the same seeded tensors; each golden is (sum, sum of |.|, element 5)."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from core.generate.latent_upscale import resize
from core.guidance.base import GuidanceContext
from core.guidance.cfg_level import Apg, CfgZeroStar, EpsilonScaling, RescaleCfg
from core.guidance.perturbed import Pag, Slg
from core.guidance.sag import Sag, attention_scores, degraded
from core.guidance.unet_level import downscaled, freeu, freeu_v2
from core.models.patches import AttentionCall, NetworkPatches, PatchPoints, Site
from core.sampling import for_family
from core.sampling.patches import CfgCall, ModelPatches

GOLDEN = {
    "rescale_cfg": (15.524261235604179, 366.18046299059586, 0.6048681606708612),
    "cfg_zero_star": (78.27958168185572, 816.8637648793299, -1.448363349773953),
    "epsilon_scaling": (39.10769709935661, 960.8963764256623, 1.7082789444425313),
    "apg_0": (6.888847653150606, 227.96956005757693, 0.7278698614800407),
    "apg_1": (-48.188629728859006, 242.71625683635122, 0.38271268719604234),
    "freeu_h": (-47.40586521732621, 490.9546247248072, -0.3058355748653412),
    "freeu_skip": (-20.601215105503798, 457.9079594500363, -0.6770798563957214),
    "freeu_v2_h": (-40.287984770257026, 501.30660015298054, -0.30803292989730835),
    "deep_shrink_down": (7.014109555631876, 39.99262912943959, 2.7794837951660156),
    "deep_shrink_up": (22.09751904429868, 106.29202499473467, 0.4264540374279022),
    "pag": (112.65696472293583, 1225.8877853281858, 8.71693555749559),
    "slg_rescaled": (61.071843491308265, 664.5592409452449, 4.725489679226265),
    "sag_scores": (144.00000055518274, 144.00000055518274, 0.0003082523762714118),
    "sag_degraded": (39.46361170336604, 604.0152214397676, 0.6399109959602356),
    "sag_noised": (47.39869824051857, 1080.5355148017406, 0.9617354273796082),
    "sag_out": (43.187832713127136, 1075.2908677309752, 0.946679949760437),
}
SCALE = 7.0
UNET = PatchPoints({"middle": 1, "input": 12, "input_after_skip": 12}, joins=12, attention=("self", "cross"))
DIT = PatchPoints({"joint": 12}, skips=("joint",))


def _check(name: str, t: Tensor, tol: float = 1e-9) -> None:
    t = t.double()
    got = (float(t.sum()), float(t.abs().sum()), float(t.flatten()[5]))
    assert got == pytest.approx(GOLDEN[name], rel=tol, abs=tol), name


def _inputs(seed: int) -> list[Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn((2, 4, 4, 4), generator=g, dtype=torch.float64) for _ in range(3)]


def _call(seed: int = 1, sigma: float = 2.5, predict: Tensor | None = None) -> CfgCall:
    x, cond, uncond = _inputs(seed)

    def again(patches: NetworkPatches, *, x: Tensor | None = None, negative: bool = False) -> Tensor | None:
        assert predict is not None
        return predict

    return CfgCall(x, torch.tensor([sigma, sigma], dtype=torch.float64), cond, uncond, SCALE, again)


def _context(points: PatchPoints = UNET) -> GuidanceContext:
    return GuidanceContext(points, for_family("sd1"), 2, resize)


def _combined(patches: ModelPatches, call: CfgCall) -> Tensor:
    """ComfyUI's ``cfg_function`` order: pre-CFG, the guidance function (or CFG), post-CFG."""
    for pre in patches.pre_cfg:
        call = pre(call)
    out = call.cfg() if patches.guidance is None else patches.guidance(call)
    for post in patches.post_cfg:
        out = post(call, out)
    return out


def test_rescale_cfg_cfg_zero_star_and_epsilon_scaling_are_comfyuis() -> None:
    ctx = _context()
    _check("rescale_cfg", _combined(RescaleCfg().model_patches(ctx), _call()))
    _check("cfg_zero_star", _combined(CfgZeroStar().model_patches(ctx), _call()))
    _check("epsilon_scaling", _combined(EpsilonScaling().model_patches(ctx), _call()))


def test_apg_with_momentum_over_two_steps_is_comfyuis() -> None:
    patches = Apg(eta=0.8, norm_threshold=2.0, momentum=0.5).model_patches(_context())
    _check("apg_0", _combined(patches, _call(2, 3.0)))
    _check("apg_1", _combined(patches, _call(3, 2.0)))  # the running average carries over
    fresh = Apg(eta=0.8, norm_threshold=2.0, momentum=0.5).model_patches(_context())
    _ = _combined(fresh, _call(2, 1.0))
    _check("apg_0", _combined(fresh, _call(2, 3.0)))  # sigma rose: a new run, the average reset


def test_freeu_and_freeu_v2_joins_are_comfyuis() -> None:
    g = torch.Generator().manual_seed(4)
    h, skip = torch.randn(2, 8, 6, 6, generator=g), torch.randn(2, 8, 6, 6, generator=g)
    out_h, out_skip = freeu(h, skip, 1.1, 0.9)
    _check("freeu_h", out_h, 1e-6)
    _check("freeu_skip", out_skip, 1e-6)
    v2_h, v2_skip = freeu_v2(h, skip, 1.3, 0.9)
    _check("freeu_v2_h", v2_h, 1e-6)
    _check("freeu_skip", v2_skip, 1e-6)


def test_deep_shrinks_resizes_are_comfyuis() -> None:
    d = torch.randn(1, 4, 7, 7, generator=torch.Generator().manual_seed(5))
    small = downscaled(d, 2.0, "bicubic", resize)
    assert small.shape[-2:] == (4, 4)  # round(7 / 2)
    _check("deep_shrink_down", small, 1e-6)
    _check("deep_shrink_up", resize(small, 7, 7, "bicubic"), 1e-6)


def test_pag_and_slg_steer_away_from_the_perturbed_prediction_as_comfyui() -> None:
    perturbed = _inputs(6)[2]
    _check("pag", _combined(Pag().model_patches(_context()), _call(predict=perturbed)))
    slg = Slg(scale=3.0, start_percent=0.0, end_percent=1.0, rescaling_scale=0.5).model_patches(_context(DIT))
    _check("slg_rescaled", _combined(slg, _call(predict=perturbed)))
    late = Slg(start_percent=0.5, end_percent=0.6).model_patches(_context(DIT))
    call = _call(sigma=14.0, predict=perturbed)  # before the start: SLG stays out
    assert torch.equal(_combined(late, call), call.cfg())


def test_sags_attention_map_blur_and_guidance_are_comfyuis() -> None:
    g = torch.Generator().manual_seed(7)
    q, k = torch.randn(2, 36, 16, generator=g) * 2, torch.randn(2, 36, 16, generator=g) * 2
    x0, x, sag = (torch.randn(2, 4, 12, 12, generator=g) for _ in range(3))
    scores = attention_scores(q, k, 2)
    _check("sag_scores", scores, 1e-6)
    _check("sag_degraded", degraded(x0, scores, 2.0), 1e-6)
    seen: list[Tensor] = []

    def network(patches: NetworkPatches, *, x: Tensor | None = None, negative: bool = False) -> Tensor | None:
        """The negative prompt's runs as the UNet makes them: the middle block's first
        self-attention reaches the patch (the recording run), then the degraded latent comes in."""
        assert negative
        if x is None:
            assert patches.replace_attention is not None
            patches.replace_attention(AttentionCall(q, k, k, 2, Site("middle", 0), 0, "self"))
            return x0
        seen.append(x)
        return sag

    call = CfgCall(x, torch.tensor([3.0, 3.0]), x0 * 0.5, x0, SCALE, network)
    out = _combined(Sag(scale=0.5, blur_sigma=2.0).model_patches(_context()), call)
    _check("sag_noised", seen[0], 1e-6)
    torch.testing.assert_close(out - call.cfg() + x, _golden_sag_out(x, seen[0], x0, sag), rtol=0, atol=1e-5)


def _golden_sag_out(x: Tensor, noised: Tensor, x0: Tensor, sag: Tensor) -> Tensor:
    """ComfyUI's ``cfg_result + (degraded - sag) * scale`` with ``x`` as the CFG result."""
    out = x + (noised - x + x0 - sag) * 0.5
    _check("sag_out", out, 1e-6)
    return out
