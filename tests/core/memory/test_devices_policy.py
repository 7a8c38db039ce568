"""Devices, probes, VRAM policy and dtype policy, on simulated cards (no GPU needed)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from core.detect.registry import Family, Registry
from core.errors import LoadoutError
from core.memory import devices as devmod
from core.memory.devices import (
    DeviceInfo,
    cpu_device,
    mps_device,
    nvidia_device,
    rocm_device,
    xpu_device,
)
from core.memory.dtypes import FP8_TYPES, FP16_UNSAFE, DtypePolicy, can_compute, can_store
from core.memory.policy import (
    DtypeOverride,
    MemorySettings,
    SettingsError,
    VramState,
    choose_vram_state,
    minimum_inference_bytes,
    pinned_memory_cap,
    reserve_bytes,
)
from core.memory.probes import CpuProbe, FakeProbe, LimitedProbe, MemoryProbe, SimulatedOutOfMemory, probe_for
from core.units import card_size

ROOT = Path(__file__).resolve().parents[3]
GIB, MIB = 1024**3, 1024**2
F32, F16, BF16, E4, E5 = torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2

DEVICES: dict[str, DeviceInfo] = {
    "pascal": nvidia_device(0, "NVIDIA GeForce GTX 1080 Ti", 11 * GIB, (6, 1)),
    "turing": nvidia_device(0, "NVIDIA GeForce RTX 2080 Ti", 11 * GIB, (7, 5)),
    "gtx16": nvidia_device(0, "NVIDIA GeForce GTX 1660 SUPER", 6 * GIB, (7, 5)),
    "ampere": nvidia_device(0, "NVIDIA GeForce RTX 3090", 24 * GIB, (8, 6)),
    "ada": nvidia_device(0, "NVIDIA GeForce RTX 4090", 24 * GIB, (8, 9)),
    "hopper": nvidia_device(0, "NVIDIA H100 80GB HBM3", 80 * GIB, (9, 0)),
    "mps13": mps_device(16 * GIB, (13, 6)),
    "mps14": mps_device(16 * GIB, (14, 2)),
    "cpu": cpu_device(32 * GIB),
    "rdna2": rocm_device(0, "AMD Radeon RX 6800", 16 * GIB, "gfx1030"),
}


# --- discovery and import safety ----------------------------------------------------------------


def test_discover_devices_on_this_machine_ends_with_the_cpu() -> None:
    found = devmod.discover_devices()
    assert found and found[-1].kind == "cpu"
    assert found[-1].total_bytes > 0 and found[-1].torch_device == "cpu"
    if not torch.cuda.is_available():
        assert all(d.kind != "cuda" for d in found)


def test_discovery_survives_a_broken_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> bool:
        raise RuntimeError("CUDA driver initialization failed")

    monkeypatch.setattr(torch.cuda, "is_available", broken)
    found = devmod.discover_devices()
    assert [d.kind for d in found][-1] == "cpu"


@pytest.mark.parametrize("hip", [None, "6.2"])
def test_discovery_maps_cuda_properties(monkeypatch: pytest.MonkeyPatch, hip: str | None) -> None:
    cards = [
        types.SimpleNamespace(name="NVIDIA GeForce RTX 4090", total_memory=24 * GIB, major=8, minor=9),
        types.SimpleNamespace(name="AMD Radeon RX 7900 XTX", total_memory=24 * GIB, major=11, minor=0,
                              gcnArchName="gfx1100", is_integrated=False),
    ]  # fmt: skip
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: cards[i])
    monkeypatch.setattr(torch.version, "hip", hip)
    found = devmod._discover_cuda()
    assert [d.index for d in found] == [0, 1]
    if hip is None:
        assert found[0].kind == "cuda" and found[0].supports_fp8_matmul and found[0].torch_device == "cuda:0"
    else:
        assert found[1].kind == "rocm" and found[1].arch == "gfx1100" and found[1].torch_device == "cuda:1"
        assert found[1].supports_bf16


_TRAP = """
import sys, torch
def boom(*a, **k):
    raise AssertionError("hardware touched at import")
for name in ("is_available", "device_count", "get_device_properties", "mem_get_info", "memory_stats",
             "current_device", "init", "_lazy_init", "get_device_name", "get_device_capability"):
    setattr(torch.cuda, name, boom)
torch.backends.mps.is_available = boom
torch.xpu.is_available = boom
try:
    import pynvml  # torch itself imports it when installed; initialising it is what must not happen
    pynvml.nvmlInit = boom
except ImportError:
    pass
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_importing_core_memory_touches_no_hardware() -> None:
    res = _run(_TRAP + """
import core.memory, core.memory.devices, core.memory.probes, core.memory.policy, core.memory.dtypes
assert not torch.cuda.is_initialized(), "CUDA initialised"
print("clean")
""")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "clean"


def test_the_import_trap_catches_hardware_calls() -> None:
    res = _run(_TRAP + "\ntorch.cuda.is_available()\n")
    assert res.returncode != 0 and "hardware touched at import" in res.stderr
    # an explicit discovery does probe (and, finding the backend broken, logs it and carries on)
    res = _run(_TRAP + "\nimport core.memory.devices as d\nprint(d.discover_devices()[-1].kind)\n")
    assert res.returncode == 0 and res.stdout.strip() == "cpu", res.stderr
    assert "device discovery: cuda failed: hardware touched at import" in res.stderr


# --- capability rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cc", "fp16", "bf16", "fp8mm"),
    [
        ("NVIDIA GeForce GTX 1080 Ti", (6, 1), False, False, False),
        ("Tesla P100-PCIE-16GB", (6, 0), True, False, False),
        ("Tesla V100-SXM2-16GB", (7, 0), True, False, False),
        ("NVIDIA GeForce RTX 2080 Ti", (7, 5), True, False, False),
        ("NVIDIA GeForce GTX 1660 SUPER", (7, 5), False, False, False),
        ("NVIDIA GeForce GTX 1650", (7, 5), False, False, False),
        ("NVIDIA T1000", (7, 5), False, False, False),
        ("Tesla T4", (7, 5), True, False, False),
        ("NVIDIA A100-SXM4-40GB", (8, 0), True, True, False),
        ("NVIDIA GeForce RTX 3090", (8, 6), True, True, False),
        ("NVIDIA GeForce RTX 4090", (8, 9), True, True, True),
        ("NVIDIA H100 80GB HBM3", (9, 0), True, True, True),
    ],
)
def test_nvidia_capabilities(name: str, cc: tuple[int, int], fp16: bool, bf16: bool, fp8mm: bool) -> None:
    d = nvidia_device(0, name, 8 * GIB, cc)
    assert (d.supports_fp16, d.supports_bf16, d.supports_fp8_matmul) == (fp16, bf16, fp8mm)
    assert d.supports_fp8  # storage works on every CUDA card
    assert bool(d.notes) == (not fp16)  # every missing fp16 is explained


@pytest.mark.parametrize(
    ("arch", "bf16", "fp8mm"),
    [("gfx1030", False, False), ("gfx1100", True, False), ("gfx90a:sramecc+:xnack-", True, False),
     ("gfx906", False, False), ("gfx942", True, False), ("gfx950", True, True), ("gfx1201", True, True)],
)  # fmt: skip
def test_rocm_capabilities(arch: str, bf16: bool, fp8mm: bool) -> None:
    d = rocm_device(0, "AMD GPU", 16 * GIB, arch)
    assert (d.kind, d.supports_fp16, d.supports_bf16, d.supports_fp8_matmul) == ("rocm", True, bf16, fp8mm)
    assert d.arch == arch.split(":")[0]


def test_mps_xpu_cpu_capabilities_and_labels() -> None:
    assert not DEVICES["mps13"].supports_bf16 and DEVICES["mps14"].supports_bf16
    assert not DEVICES["mps14"].supports_fp8 and DEVICES["mps14"].shared_memory
    assert xpu_device(0, "Intel Arc A770", 16 * GIB).torch_device == "xpu:0"
    assert DEVICES["ampere"].label == "NVIDIA GeForce RTX 3090 (cuda:0, 24 GiB, CC 8.6)"
    assert DEVICES["rdna2"].label == "AMD Radeon RX 6800 (cuda:0, 16 GiB, gfx1030)"
    with pytest.raises(ValueError):
        DeviceInfo("cuda", 0, "x", -1)


# --- probes -------------------------------------------------------------------------------------


def test_fake_probe_models_a_caching_allocator() -> None:
    p = FakeProbe(total=8 * GIB, used=1 * GIB)
    assert isinstance(p, MemoryProbe) and p.device.simulated and p.device.total_bytes == 8 * GIB
    assert (p.total(), p.free(), p.reserved(), p.allocated(), p.device_used()) == (
        8 * GIB,
        7 * GIB,
        0,
        0,
        GIB,
    )
    p.allocate(2 * GIB)
    assert (p.free(), p.reserved(), p.allocated(), p.device_used()) == (5 * GIB, 2 * GIB, 2 * GIB, 3 * GIB)
    p.release(1 * GIB)  # stays reserved, yet counts as free: the allocator hands it out again
    assert (p.free(), p.reserved(), p.allocated(), p.driver_free()) == (6 * GIB, 2 * GIB, GIB, 5 * GIB)
    p.allocate(GIB // 2)  # served from the cache: reserved does not grow
    assert (p.reserved(), p.free()) == (2 * GIB, 5 * GIB + GIB // 2)
    p.empty_cache()
    assert (p.reserved(), p.free(), p.device_used()) == (
        GIB + GIB // 2,
        5 * GIB + GIB // 2,
        2 * GIB + GIB // 2,
    )
    p.set_external(6 * GIB)  # another process grabs memory
    assert p.free() == GIB // 2
    with pytest.raises(SimulatedOutOfMemory) as err:
        p.allocate(GIB)
    assert isinstance(err.value, torch.OutOfMemoryError)
    assert p.allocated() == GIB + GIB // 2  # a failed allocation changes nothing
    with pytest.raises(ValueError):
        p.release(4 * GIB)
    with pytest.raises(ValueError):
        FakeProbe(total=GIB, used=2 * GIB)


def test_fake_probe_capability_and_name() -> None:
    p = FakeProbe(total=6 * GIB, name="NVIDIA GeForce GTX 1660", capability=(7, 5))
    assert p.device.name == "NVIDIA GeForce GTX 1660" and not p.device.supports_fp16
    assert FakeProbe(total=GIB, device=DEVICES["mps14"]).device.kind == "mps"


def test_limited_probe_caps_a_bigger_card() -> None:
    inner = FakeProbe(total=24 * GIB)
    lim = LimitedProbe(inner, 4 * GIB)
    assert (lim.total(), lim.free(), lim.device.total_bytes) == (4 * GIB, 4 * GIB, 4 * GIB)
    assert "limited to 4 GiB of 24 GiB" in lim.device.notes[-1] and lim.device.simulated
    inner.allocate(3 * GIB)
    assert (lim.free(), lim.allocated(), lim.device_used()) == (GIB, 3 * GIB, 3 * GIB)
    inner.release(2 * GIB)  # cached memory is free on the simulated card too
    assert lim.free() == 3 * GIB
    inner.set_external(int(22.5 * GIB))  # the real card is nearly full: that wins over the limit
    assert lim.free() == inner.free() < 3 * GIB
    assert LimitedProbe(FakeProbe(total=2 * GIB), 8 * GIB).total() == 2 * GIB
    with pytest.raises(ValueError):
        LimitedProbe(inner, 0)


def test_limited_probe_on_the_cpu_charges_what_the_manager_placed() -> None:
    cpu = probe_for(devmod.cpu_device(64 * GIB))
    assert isinstance(cpu, CpuProbe) and 0 < cpu.free() <= cpu.total()
    placed = [GIB]
    lim = LimitedProbe(cpu, 4 * GIB, charge=lambda: placed[0])
    assert lim.free() == min(cpu.free(), 3 * GIB)
    placed[0] = 5 * GIB
    assert lim.free() == 0 and lim.device_used() == 4 * GIB
    assert choose_vram_state(lim.device, lim.total()).state is VramState.LOW_VRAM  # a simulated 4 GiB card


def test_nvml_reading_and_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    from core.memory.nvml import Nvml as _Nvml

    props = types.SimpleNamespace(uuid="1234-abcd", pci_bus_id=1, pci_device_id=0)
    calls: list[str] = []
    fake = types.ModuleType("pynvml")
    fake.nvmlInit = lambda: None  # type: ignore[attr-defined]

    def by_uuid(uuid: str) -> str:
        calls.append(uuid)
        return "handle"

    fake.nvmlDeviceGetHandleByUUID = by_uuid  # type: ignore[attr-defined]
    fake.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=3 * GIB)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert _Nvml(props).used() == 3 * GIB and calls == ["GPU-1234-abcd"]

    def no_driver() -> None:
        raise OSError("NVML Shared Library Not Found")

    fake.nvmlInit = no_driver  # type: ignore[attr-defined]
    nv = _Nvml(props)
    assert nv.used() is None and nv.used() is None  # fails once, then stays quiet


def test_nvml_counts_used_memory_as_nvidia_smi_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML's v1 ``used`` includes what the driver reserves; nvidia-smi shows v2's, without it (an
    H200 read 614 MiB more on the plot than in nvidia-smi). v1 where the driver has no v2."""
    from core.memory.nvml import Nvml as _Nvml

    reserved, used = 614 << 20, 3 * GIB
    asked: list[object] = []
    fake = types.ModuleType("pynvml")
    fake.nvmlInit = lambda: None  # type: ignore[attr-defined]
    fake.nvmlMemory_v2 = 0x02000028  # type: ignore[attr-defined]
    fake.nvmlDeviceGetHandleByUUID = lambda uuid: "handle"  # type: ignore[attr-defined]

    def memory_info(handle: str, version: int | None = None) -> types.SimpleNamespace:
        asked.append(version)
        if version is None:
            return types.SimpleNamespace(used=used + reserved)
        return types.SimpleNamespace(used=used, reserved=reserved)

    fake.nvmlDeviceGetMemoryInfo = memory_info  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    props = types.SimpleNamespace(uuid="GPU-1", pci_bus_id=1, pci_device_id=0)
    assert _Nvml(props).used() == used and asked == [0x02000028]

    def old_driver(handle: str, version: int | None = None) -> types.SimpleNamespace:
        asked.append(version)
        if version is not None:
            raise RuntimeError("NVML_ERROR_FUNCTION_NOT_FOUND")
        return types.SimpleNamespace(used=used + reserved)

    fake.nvmlDeviceGetMemoryInfo = old_driver  # type: ignore[attr-defined]
    asked.clear()
    nv = _Nvml(props)
    assert nv.used() == used + reserved and nv.used() == used + reserved
    assert asked == [0x02000028, None, None]  # v2 asked once, then v1 only


# --- VRAM states, reserve, inference memory -----------------------------------------------------


@pytest.mark.parametrize(
    ("gib", "state"),
    [(2, VramState.LOW_VRAM), (4, VramState.LOW_VRAM), (6, VramState.NORMAL_VRAM), (8, VramState.NORMAL_VRAM),
     (12, VramState.NORMAL_VRAM), (16, VramState.NORMAL_VRAM), (24, VramState.NORMAL_VRAM),
     (48, VramState.NORMAL_VRAM), (80, VramState.NORMAL_VRAM), (0.25, VramState.LOW_VRAM),
     (1.95, VramState.LOW_VRAM), (3.8, VramState.LOW_VRAM), (5.8, VramState.NORMAL_VRAM)],
)  # fmt: skip
def test_vram_state_from_card_size(gib: float, state: VramState) -> None:
    p = FakeProbe(total=int(gib * GIB))
    d = choose_vram_state(p.device, p.total())
    assert d.state is state and d.automatic
    assert d.reason.startswith(f"{card_size(gib * GIB)} card: {state.title}; ")
    assert ("high VRAM" in d.reason) == (gib >= 48)


def test_vram_state_sentence_and_special_devices() -> None:
    d = choose_vram_state(DEVICES["ampere"], 24 * GIB)
    assert d.reason == "24 GiB card: normal VRAM; models load fully when they fit, partially otherwise"
    assert choose_vram_state(DEVICES["cpu"], 32 * GIB).state is VramState.DISABLED
    assert choose_vram_state(DEVICES["mps14"], 16 * GIB).state is VramState.SHARED
    jetson = nvidia_device(0, "Orin", 32 * GIB, (8, 7), integrated=True)
    assert choose_vram_state(jetson, 32 * GIB).state is VramState.SHARED


def test_vram_state_overrides() -> None:
    card = DEVICES["ampere"]
    low = choose_vram_state(card, 24 * GIB, MemorySettings(vram_state=VramState.LOW_VRAM))
    assert low.state is VramState.LOW_VRAM and not low.automatic and "your setting" in low.reason
    high = choose_vram_state(card, 80 * GIB, MemorySettings(vram_state=VramState.HIGH_VRAM))
    assert high.state is VramState.HIGH_VRAM and "never offloaded" in high.reason
    off = choose_vram_state(card, 24 * GIB, MemorySettings(vram_state=VramState.DISABLED))
    assert off.state is VramState.DISABLED
    same = choose_vram_state(card, 24 * GIB, MemorySettings(vram_state=VramState.NORMAL_VRAM))
    assert same.automatic
    cpu = choose_vram_state(DEVICES["cpu"], 32 * GIB, MemorySettings(vram_state=VramState.HIGH_VRAM))
    assert cpu.state is VramState.DISABLED and "no effect" in cpu.reason
    assert (
        VramState.parse("lowvram") is VramState.LOW_VRAM
        and VramState.parse("High_VRAM") is VramState.HIGH_VRAM
    )
    with pytest.raises(SettingsError, match="unknown VRAM state"):
        VramState.parse("medium")


@pytest.mark.parametrize(
    ("platform", "gib", "expected_mib"),
    [("linux", 8, 400), ("linux", 24, 400), ("darwin", 16, 400), ("win32", 8, 600), ("win32", 15, 600),
     ("win32", 16, 700), ("win32", 24, 700)],
)  # fmt: skip
def test_reserve_rules(platform: str, gib: int, expected_mib: int) -> None:
    card = nvidia_device(0, "card", gib * GIB, (8, 6))
    reserve = reserve_bytes(card, gib * GIB, platform)
    assert reserve == expected_mib * MIB
    # no fixed activation headroom any more: activations are predicted per workload
    assert minimum_inference_bytes(reserve) == expected_mib * MIB
    # a real card capped to a smaller size keeps its reserve (the driver and the desktop are real)
    assert reserve_bytes(replace(card, simulated=True), gib * GIB, platform) == expected_mib * MIB


def test_a_card_simulated_on_the_cpu_keeps_no_reserve_unless_asked() -> None:
    simulated = replace(DEVICES["cpu"], simulated=True)
    assert reserve_bytes(simulated, GIB, "linux") == 0
    assert reserve_bytes(simulated, GIB, "win32") == 0
    assert reserve_bytes(simulated, GIB, "linux", MemorySettings(reserve_bytes=64 * MIB)) == 64 * MIB


def test_reserve_and_inference_overrides_and_pinned_cap() -> None:
    s = MemorySettings(reserve_bytes=GIB, min_inference_bytes=2 * GIB)
    assert reserve_bytes(DEVICES["ampere"], 24 * GIB, "win32", s) == GIB
    assert minimum_inference_bytes(GIB, s) == 2 * GIB
    assert reserve_bytes(DEVICES["cpu"], 32 * GIB, "linux") == 0
    assert pinned_memory_cap(100 * GIB, "linux") == 95 * GIB
    assert pinned_memory_cap(100 * GIB, "win32") == 45 * GIB
    assert pinned_memory_cap(100 * GIB, "linux", MemorySettings(pinned_memory=False)) == 0
    assert pinned_memory_cap(100 * GIB, "linux", MemorySettings(pinned_fraction=0.5)) == 50 * GIB


@pytest.mark.parametrize(
    "kwargs",
    [{"reserve_bytes": -1}, {"reserve_bytes": True}, {"min_inference_bytes": 1.5}, {"pinned_fraction": 0.0},
     {"pinned_fraction": 1.0},
     {"dtype_overrides": (DtypeOverride("vae", "fp32"), DtypeOverride("vae", compute="bf16"))}],
)  # fmt: skip
def test_settings_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(SettingsError) as err:
        MemorySettings(**kwargs)  # type: ignore[arg-type]
    assert isinstance(err.value, LoadoutError) and isinstance(err.value, ValueError)


def test_dtype_override_validation() -> None:
    with pytest.raises(SettingsError, match="unknown storage dtype"):
        DtypeOverride("vae", storage="fp12")
    with pytest.raises(SettingsError, match="unknown model role"):
        DtypeOverride("unet", compute="fp16")  # type: ignore[arg-type]
    with pytest.raises(SettingsError, match="sets nothing"):
        DtypeOverride("vae")


# --- dtype policy -------------------------------------------------------------------------------

POLICY = DtypePolicy()

# device, role, family, stored -> storage, compute
TABLE = [
    ("pascal", "diffusion_model", "sdxl", F16, F16, F32),
    ("pascal", "diffusion_model", "flux-dev", E4, E4, F32),
    ("turing", "diffusion_model", "sdxl", F16, F16, F16),
    ("turing", "diffusion_model", "sd1", F32, F16, F16),
    ("turing", "diffusion_model", "flux-dev", BF16, F16, F16),
    ("turing", "diffusion_model", "flux-dev", E4, E4, F16),
    ("turing", "diffusion_model", "flux-fill", BF16, BF16, F32),
    ("turing", "vae", "vae-sd", F32, F32, F32),
    ("turing", "text_encoder", "t5-xxl", F16, F16, F16),
    ("turing", "text_encoder", "qwen2.5-vl-7b", BF16, BF16, F32),
    ("gtx16", "diffusion_model", "sd1", F16, F16, F32),
    ("gtx16", "diffusion_model", "sdxl", F32, F32, F32),
    ("gtx16", "text_encoder", "clip-l", F16, F16, F32),
    ("ampere", "diffusion_model", "sdxl", F16, F16, F16),
    ("ampere", "diffusion_model", "sd1", BF16, BF16, BF16),
    ("ampere", "diffusion_model", "flux-dev", BF16, BF16, BF16),
    ("ampere", "diffusion_model", "flux-dev", F16, F16, F16),
    ("ampere", "diffusion_model", "flux-dev", E4, E4, BF16),
    ("ampere", "diffusion_model", "flux-dev", E5, E5, BF16),
    ("ampere", "diffusion_model", "qwen-image", F16, BF16, BF16),
    ("ampere", "vae", "vae-sd", F32, BF16, BF16),
    ("ampere", "vae", "vae-sd", F16, BF16, BF16),
    ("ampere", "text_encoder", "t5-xxl", F32, F16, F16),
    ("ampere", "text_encoder", "t5-xxl", E4, E4, F16),
    ("ada", "diffusion_model", "flux-dev", E4, E4, BF16),
    ("hopper", "diffusion_model", "wan2.1", BF16, BF16, BF16),
    ("hopper", "diffusion_model", None, F32, F16, F16),
    ("mps13", "diffusion_model", "flux-dev", BF16, F16, F16),
    ("mps13", "diffusion_model", "flux-dev", E4, F16, F16),
    ("mps13", "diffusion_model", "flux-fill", BF16, F32, F32),
    ("mps13", "vae", "vae-flux", BF16, F32, F32),
    ("mps14", "diffusion_model", "flux-dev", E4, BF16, BF16),
    ("mps14", "vae", "vae-sd", F32, BF16, BF16),
    ("cpu", "diffusion_model", "sdxl", F16, F16, F32),
    ("cpu", "diffusion_model", "flux-dev", BF16, BF16, F32),
    ("cpu", "diffusion_model", "flux-dev", E4, E4, F32),
    ("cpu", "text_encoder", "t5-xxl", F32, F32, F32),
    ("cpu", "vae", "vae-sd", F16, F16, F32),
    ("rdna2", "diffusion_model", "flux-dev", BF16, F16, F16),
    ("rdna2", "vae", "vae-sd", F32, F32, F32),
]


@pytest.mark.parametrize(("dev", "role", "family", "stored", "storage", "compute"), TABLE)
def test_dtype_table(
    dev: str, role: str, family: str | None, stored: torch.dtype, storage: torch.dtype, compute: torch.dtype
) -> None:
    c = POLICY.storage_and_compute(role, family, stored, DEVICES[dev])
    assert (c.storage, c.compute) == (storage, compute), c.reason
    assert c.manual_cast == (storage != compute)


ROLES_FAMILIES = [
    ("diffusion_model", "sdxl"), ("diffusion_model", "flux-dev"), ("diffusion_model", "hidream"),
    ("text_encoder", "clip-g"), ("text_encoder", "gemma2-2b"), ("vae", "vae-sd"), ("controlnet", None),
]  # fmt: skip


@pytest.mark.parametrize("dev", sorted(DEVICES))
def test_every_automatic_decision_is_possible_safe_and_explained(dev: str) -> None:
    device = DEVICES[dev]
    for role, family in ROLES_FAMILIES:
        for stored in (F32, F16, BF16, E4, E5, None):
            c = POLICY.storage_and_compute(role, family, stored, device)
            where = f"{dev} {role} {family} {stored}: {c.reason}"
            assert can_store(device, c.storage) and can_compute(device, c.compute), where
            assert c.compute not in FP8_TYPES, where  # fp8 matmul is never automatic
            assert c.compute != F16 or (device.supports_fp16 and role != "vae" and family not in FP16_UNSAFE)
            assert device.kind != "cpu" or c.compute == F32, where
            assert c.reason.count("compute ") >= 1 and "storage " in c.reason and len(c.reason) > 40, where
            assert c.reason.startswith(("Diffusion model", "Text encoder", "VAE", "ControlNet")), where


def test_compute_overrides() -> None:
    fp8 = MemorySettings(dtype_overrides=(DtypeOverride("diffusion_model", compute="fp8_e4m3fn"),))
    c = POLICY.storage_and_compute("diffusion_model", "flux-dev", BF16, DEVICES["ada"], fp8)
    assert (c.storage, c.compute, c.manual_cast) == (E4, E4, False) and "your setting" in c.reason
    assert "quantized from bf16" in c.reason
    c = POLICY.storage_and_compute("diffusion_model", "flux-dev", BF16, DEVICES["ampere"], fp8)
    assert (c.storage, c.compute) == (BF16, BF16) and "needs fp8 matmul" in c.reason
    half = MemorySettings(dtype_overrides=(DtypeOverride("diffusion_model", compute="fp16"),))
    c = POLICY.storage_and_compute("diffusion_model", "sdxl", F16, DEVICES["gtx16"], half)
    assert (c.storage, c.compute) == (F16, F16) and "NaN" in c.reason  # honoured, with the warning
    c = POLICY.storage_and_compute("vae", "vae-sd", F16, DEVICES["gtx16"], half)  # other roles untouched
    assert c.compute == F32
    bf = MemorySettings(dtype_overrides=(DtypeOverride("diffusion_model", compute="bf16"),))
    c = POLICY.storage_and_compute("diffusion_model", "sdxl", F16, DEVICES["mps13"], bf)
    assert c.compute == F16 and "lacks" in c.reason  # MPS before macOS 14 cannot run bf16 at all


def test_storage_overrides() -> None:
    e4 = MemorySettings(dtype_overrides=(DtypeOverride("diffusion_model", storage="fp8_e4m3fn"),))
    c = POLICY.storage_and_compute("diffusion_model", "flux-dev", BF16, DEVICES["turing"], e4)
    assert (c.storage, c.compute, c.manual_cast) == (E4, F16, True) and "your setting" in c.reason
    c = POLICY.storage_and_compute("diffusion_model", "flux-dev", BF16, DEVICES["mps14"], e4)
    assert c.storage == BF16 and "impossible" in c.reason
    bf = MemorySettings(dtype_overrides=(DtypeOverride("text_encoder", storage="bf16"),))
    c = POLICY.storage_and_compute("text_encoder", "t5-xxl", F32, DEVICES["cpu"], bf)
    assert (c.storage, c.compute, c.manual_cast) == (BF16, F32, True)
    both = MemorySettings(
        dtype_overrides=(DtypeOverride("diffusion_model", storage="fp16", compute="fp8_e4m3fn"),)
    )
    c = POLICY.storage_and_compute("diffusion_model", "flux-dev", E4, DEVICES["ada"], both)
    assert (c.storage, c.compute) == (F16, BF16) and "fp8 matmul needs fp8 weights" in c.reason


def test_family_preferences_come_from_the_registry() -> None:
    reg = Registry()
    reg.add(Family("my-dit", "diffusion", "My DiT", default_dtype="bf16"))
    c = DtypePolicy(reg).storage_and_compute("diffusion_model", "my-dit", F32, DEVICES["ampere"])
    assert c.compute == BF16 and "My DiT runs best in bf16" in c.reason
    c = DtypePolicy(reg).storage_and_compute("diffusion_model", "sdxl", F32, DEVICES["ampere"])
    assert c.compute == F16  # unknown to this registry: the fp16 default
    c = POLICY.storage_and_compute("diffusion_model", "sdxl", "F8_E4M3", DEVICES["ampere"])
    assert c.storage == E4  # safetensors dtype names are accepted
    with pytest.raises(SettingsError):
        POLICY.storage_and_compute("unet", "sdxl", F16, DEVICES["ampere"])


# --- real GPU (skipped without CUDA) ------------------------------------------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@needs_cuda
def test_torch_cuda_probe_agrees_with_torch() -> None:
    card = devmod.discover_devices()[0]
    assert card.kind in ("cuda", "rocm") and card.compute_capability == torch.cuda.get_device_capability(0)
    probe = probe_for(card)
    x = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
    del x  # freed: stays reserved, and must count as free
    stats = torch.cuda.memory_stats()
    driver_free, total = torch.cuda.mem_get_info()
    unused = stats["reserved_bytes.all.current"] - stats["active_bytes.all.current"]
    assert probe.total() == total and abs(probe.free() - (driver_free + unused)) < 64 * MIB
    assert probe.reserved() >= 256 * MIB and probe.allocated() == torch.cuda.memory_allocated()
    assert probe.device_used() >= probe.reserved()


@pytest.mark.parametrize(
    ("capability", "arches", "runs"),
    [
        (
            (6, 1),
            ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"],
            False,
        ),  # GTX 1080, cu130
        ((6, 1), ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"], True),  # cu126 build
        ((8, 9), ["sm_75", "sm_80", "sm_86", "sm_90"], True),  # an RTX 4090 runs sm_86 code
        ((12, 0), ["sm_75", "sm_80", "sm_86", "sm_90", "compute_90"], True),  # PTX, compiled by the driver
        ((12, 0), ["sm_75", "sm_80", "sm_86", "sm_90"], False),  # an RTX 50 on a build without it
        ((9, 0), [], True),
    ],
)
def test_a_card_the_torch_build_has_no_kernels_for_is_not_used(
    capability: tuple[int, int], arches: list[str], runs: bool
) -> None:
    from core.memory.devices import cuda_arch_supported

    assert cuda_arch_supported(capability, arches) is runs
