"""What compute devices this machine has, and what each can do.

Nothing here runs at import time: :func:`discover_devices` is called explicitly by the composition
root (or a CLI command), and the capability rules are pure functions of a device's name, compute
capability or architecture, so they are tested on a CPU-only machine with simulated cards.

Capability flags say what is *worth* using, not merely what PyTorch accepts:

- ``supports_fp16`` / ``supports_bf16``: computing in that dtype is correct and fast on the device.
- ``supports_fp8``: fp8 tensors can live on the device (storage; they are upcast to compute).
- ``supports_fp8_matmul``: fp8 x fp8 matrix products run natively (``torch._scaled_mm``).
"""

from __future__ import annotations

import logging
import platform
from dataclasses import dataclass, replace
from typing import Any, Literal

import psutil
import torch

from core.units import card_size

log = logging.getLogger(__name__)

DeviceKind = Literal["cuda", "rocm", "mps", "xpu", "cpu"]


#: NVIDIA Turing cards without tensor cores whose fp16 output is NaN / black images in SD
#: (ComfyUI's ``nvidia_16_series`` list; names as the driver reports them).
_NVIDIA_BROKEN_FP16 = (
    "1660", "1650", "1630", "T500", "T550", "T600", "MX550", "MX450",
    "CMP 30HX", "T2000", "T1000", "T1200",
)  # fmt: skip

#: Pascal chips with full-rate fp16 (GP100 = CC 6.0, Tegra X2 = CC 6.2); the rest of Pascal (CC 6.1)
#: runs fp16 arithmetic at 1/64 of fp32 speed.
_FAST_FP16_PASCAL = ((6, 0), (6, 2))


@dataclass(frozen=True)
class DeviceInfo:
    kind: DeviceKind
    index: int
    name: str
    total_bytes: int
    compute_capability: tuple[int, int] | None = None  # NVIDIA CC; on ROCm what torch reports
    arch: str | None = None  # ROCm gfx architecture ("gfx1100"), None elsewhere
    supports_fp16: bool = False
    supports_bf16: bool = False
    supports_fp8: bool = False
    supports_fp8_matmul: bool = False
    is_integrated: bool = False  # an iGPU/APU sharing system memory
    simulated: bool = False  # a FakeProbe card, or a real device capped by LimitedProbe
    notes: tuple[str, ...] = ()  # facts worth telling a person ("fp16 gives NaNs on GTX 16-series")

    def __post_init__(self) -> None:
        if self.total_bytes < 0:
            raise ValueError(f"total_bytes must not be negative, got {self.total_bytes}")
        if self.index < 0:
            raise ValueError(f"device index must not be negative, got {self.index}")

    @property
    def torch_device(self) -> str:
        """The device string PyTorch uses ("cuda:0"; ROCm builds also use "cuda")."""
        if self.kind in ("cpu", "mps"):
            return self.kind
        torch_kind = "cuda" if self.kind == "rocm" else self.kind
        return f"{torch_kind}:{self.index}"

    @property
    def shared_memory(self) -> bool:
        """True where the GPU and the CPU draw on the same RAM (Apple silicon, iGPUs)."""
        return self.kind == "mps" or self.is_integrated

    @property
    def is_accelerator(self) -> bool:
        return self.kind != "cpu"

    @property
    def capability_text(self) -> str:
        if self.kind == "rocm" and self.arch:
            return self.arch
        if self.compute_capability is not None:
            return "CC {}.{}".format(*self.compute_capability)
        return self.kind.upper() if self.kind != "cpu" else "CPU"

    @property
    def label(self) -> str:
        """What a person reads: "NVIDIA GeForce RTX 3090 (cuda:0, 24 GiB, CC 8.6)"."""
        return f"{self.name} ({self.torch_device}, {card_size(self.total_bytes)}, {self.capability_text})"

    def limited_to(self, limit_bytes: int) -> DeviceInfo:
        """This device as a smaller simulated card (a VRAM limit)."""
        total = min(self.total_bytes, limit_bytes)
        note = f"limited to {card_size(total)} of {card_size(self.total_bytes)} by a VRAM limit"
        return replace(self, total_bytes=total, simulated=True, notes=(*self.notes, note))


# --- capability rules (pure) ------------------------------------------------------------------


def nvidia_device(
    index: int,
    name: str,
    total_bytes: int,
    capability: tuple[int, int],
    *,
    integrated: bool = False,
    simulated: bool = False,
) -> DeviceInfo:
    """An NVIDIA CUDA device with its capabilities derived from the compute capability and name."""
    notes: list[str] = []
    broken = any(tag in name for tag in _NVIDIA_BROKEN_FP16)
    if broken:
        fp16 = False
        notes.append("GTX 16-series / T-series Turing cards produce NaNs (black images) in fp16")
    elif capability >= (7, 0) or capability in _FAST_FP16_PASCAL:
        fp16 = True
    else:
        fp16 = False
        notes.append(f"CC {capability[0]}.{capability[1]} runs fp16 math at a small fraction of fp32 speed")
    bf16 = capability >= (8, 0)
    fp8_matmul = capability >= (8, 9)
    return DeviceInfo(
        kind="cuda",
        index=index,
        name=name,
        total_bytes=total_bytes,
        compute_capability=capability,
        supports_fp16=fp16,
        supports_bf16=bf16,
        supports_fp8=True,  # fp8 tensors can be stored and cast on any CUDA device
        supports_fp8_matmul=fp8_matmul,
        is_integrated=integrated,
        simulated=simulated,
        notes=tuple(notes),
    )


def _gfx_base(arch: str) -> str:
    return arch.split(":", 1)[0].strip().lower()


def rocm_device(
    index: int,
    name: str,
    total_bytes: int,
    arch: str,
    *,
    capability: tuple[int, int] | None = None,
    integrated: bool = False,
    simulated: bool = False,
) -> DeviceInfo:
    """An AMD GPU on a ROCm build of PyTorch, capabilities from its gfx architecture."""
    gfx = _gfx_base(arch)
    notes: list[str] = []
    body = gfx.removeprefix("gfx")
    major = int(body[:-2]) if len(body) > 2 and body[:-2].isdigit() else 0  # gfx1100 -> 11, gfx90a -> 9
    # RDNA1/RDNA2 (gfx10xx), Vega (gfx900-906) and older have no bf16 units.
    old = gfx.startswith(("gfx10", "gfx8")) or gfx in ("gfx900", "gfx902", "gfx904", "gfx906", "gfx909")
    bf16 = not old and major >= 9
    if not bf16:
        notes.append(f"{gfx} has no native bf16")
    # OCP fp8 (float8_e4m3fn) matmul: MI350 (gfx950) and RDNA4 (gfx12xx). MI300 (gfx942) only has
    # the fnuz variants, which model files do not use.
    fp8_matmul = gfx == "gfx950" or gfx.startswith("gfx12")
    return DeviceInfo(
        kind="rocm",
        index=index,
        name=name,
        total_bytes=total_bytes,
        compute_capability=capability,
        arch=gfx,
        supports_fp16=True,
        supports_bf16=bf16,
        supports_fp8=True,
        supports_fp8_matmul=fp8_matmul,
        is_integrated=integrated,
        simulated=simulated,
        notes=tuple(notes),
    )


def mps_device(total_bytes: int, macos: tuple[int, ...], *, name: str = "Apple GPU (MPS)") -> DeviceInfo:
    """Apple silicon through MPS: fp16 always, bf16 from macOS 14, no fp8 dtypes at all."""
    bf16 = macos >= (14,)
    notes = ["MPS has no fp8 dtypes: fp8 weights are upcast when loaded"]
    if not bf16:
        notes.append("MPS supports bf16 only from macOS 14")
    return DeviceInfo(
        kind="mps",
        index=0,
        name=name,
        total_bytes=total_bytes,
        supports_fp16=True,
        supports_bf16=bf16,
        supports_fp8=False,
        supports_fp8_matmul=False,
        is_integrated=True,
        notes=tuple(notes),
    )


def xpu_device(
    index: int, name: str, total_bytes: int, *, fp16: bool = True, bf16: bool = True, integrated: bool = False
) -> DeviceInfo:
    """An Intel GPU (Arc, Data Center Max, iGPU) through torch.xpu."""
    return DeviceInfo(
        kind="xpu",
        index=index,
        name=name,
        total_bytes=total_bytes,
        supports_fp16=fp16,
        supports_bf16=bf16,
        supports_fp8=False,  # conservative: fp8 weights are upcast when loaded
        supports_fp8_matmul=False,
        is_integrated=integrated,
        notes=("fp8 weights are upcast when loaded on XPU",),
    )


def cpu_device(total_bytes: int, name: str = "CPU") -> DeviceInfo:
    """The CPU: computes in fp32 (fp16/bf16 math is slow there) but stores any dtype."""
    return DeviceInfo(
        kind="cpu",
        index=0,
        name=name,
        total_bytes=total_bytes,
        supports_fp16=False,
        supports_bf16=False,
        supports_fp8=True,
        supports_fp8_matmul=False,
        notes=("the CPU computes in fp32; fp16/bf16 math there is slow",),
    )


# --- discovery (touches hardware; only when called) --------------------------------------------


def discover_devices() -> list[DeviceInfo]:
    """Every usable device, accelerators first and the CPU last. Never raises for missing hardware.

    A backend that reports itself available but then fails (a broken driver) is skipped with a
    warning in the log, so the CPU is always there.
    """
    found: list[DeviceInfo] = []
    for backend in (_discover_cuda, _discover_xpu, _discover_mps):
        try:
            found.extend(backend())
        except Exception as exc:  # a broken driver must not stop the application from starting
            log.warning("device discovery: %s failed: %s", backend.__name__.removeprefix("_discover_"), exc)
    found.append(cpu_device(int(psutil.virtual_memory().total), _cpu_name()))
    return found


def _cpu_name() -> str:
    return platform.processor() or platform.machine() or "CPU"


def cuda_arch_supported(capability: tuple[int, int], arch_list: list[str]) -> bool:
    """Whether a torch build compiled for ``arch_list`` (``torch.cuda.get_arch_list()``: ``sm_86``,
    ``compute_90`` ...) has kernels an NVIDIA card of ``capability`` runs: machine code of the same
    major version at or below its minor, or PTX at or below it (the driver compiles it). A CUDA 13
    build has none for a GTX 10-series card (6.1): every kernel would fail with "no kernel image"."""
    major, minor = capability
    for arch in arch_list:
        kind, _, digits = arch.partition("_")
        if not digits.isdigit() or len(digits) < 2:
            continue
        built = (int(digits[:-1]), int(digits[-1]))
        if kind == "sm" and built[0] == major and built[1] <= minor:
            return True
        if kind == "compute" and built <= capability:
            return True
    return not arch_list  # a build that does not say: assume it runs


def _discover_cuda() -> list[DeviceInfo]:
    if not torch.cuda.is_available():
        return []
    hip = getattr(torch.version, "hip", None)
    arches = [] if hip else list(torch.cuda.get_arch_list())
    out: list[DeviceInfo] = []
    for i in range(torch.cuda.device_count()):
        props: Any = torch.cuda.get_device_properties(i)
        name = str(props.name)
        total = int(props.total_memory)
        integrated = bool(getattr(props, "is_integrated", False))
        cc = (int(props.major), int(props.minor))
        if not hip and not cuda_arch_supported(cc, arches):
            log.warning(
                "device discovery: %s (compute capability %d.%d) is not supported by this build of "
                "torch %s (built for %s); it is not used. Install the build for older cards "
                "(docs/install.md: the CUDA 12.6 download).",
                name, cc[0], cc[1], torch.__version__, " ".join(arches),
            )  # fmt: skip
            continue
        if hip:
            arch = str(getattr(props, "gcnArchName", "") or "gfx000")
            out.append(rocm_device(i, name, total, arch, capability=cc, integrated=integrated))
        else:
            out.append(nvidia_device(i, name, total, cc, integrated=integrated))
    return out


def _discover_xpu() -> list[DeviceInfo]:
    xpu: Any = getattr(torch, "xpu", None)
    if xpu is None or not xpu.is_available():
        return []
    out: list[DeviceInfo] = []
    for i in range(xpu.device_count()):
        props: Any = xpu.get_device_properties(i)
        fp16 = bool(getattr(props, "has_fp16", True))
        try:
            bf16 = bool(xpu.is_bf16_supported())
        except Exception:  # older torch.xpu without the query
            bf16 = False
        integrated = "integrated" in str(getattr(props, "device_type", "")).lower()
        out.append(
            xpu_device(
                i, str(props.name), int(props.total_memory), fp16=fp16, bf16=bf16, integrated=integrated
            )
        )
    return out


def _discover_mps() -> list[DeviceInfo]:
    mps_backend: Any = getattr(torch.backends, "mps", None)
    if mps_backend is None or not mps_backend.is_available():
        return []
    total = mps_working_set_bytes()
    return [mps_device(total, macos_version())]


def mps_working_set_bytes() -> int:
    """How much memory Metal lets this process use (about 2/3-3/4 of RAM), or all RAM if unknown."""
    recommended = getattr(torch.mps, "recommended_max_memory", None)
    if recommended is not None:
        try:
            value = int(recommended())
            if value > 0:
                return value
        except RuntimeError:
            pass
    return int(psutil.virtual_memory().total)


def macos_version() -> tuple[int, ...]:
    """(14, 2, 1) on macOS 14.2.1; () elsewhere."""
    text = platform.mac_ver()[0]
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def parse_device_name(name: str) -> tuple[str, int | None]:
    """("cuda", 1) for "cuda:1", ("cuda", None) for "cuda" (the first), ("cpu", None) for "cpu";
    a LoadoutError for text that names no device ("gpu", "cuda:x", "cuda:-1")."""
    from core.errors import LoadoutError

    kind, sep, index = name.strip().lower().partition(":")
    known = ("cpu", "cuda", "rocm", "mps", "xpu")
    if kind not in known or (sep and not index.isdigit()):
        raise LoadoutError(
            f"{name!r} is not a device name",
            why=f"a device is one of {', '.join(known)}, optionally with an index (cuda:1)",
            fix="Use cpu, cuda or cuda:N as the device",
            code="bad_device",
        )
    return kind, (int(index) if sep else None)


def pick_device(name: str, devices: list[DeviceInfo]) -> DeviceInfo | None:
    """The device of ``devices`` that ``name`` names: its kind ("cuda" also finds ROCm cards,
    which torch calls cuda) and, when given, its index; None when there is none such."""
    kind, index = parse_device_name(name)
    for dev in devices:
        same_kind = dev.kind == kind or (kind == "cuda" and dev.kind == "rocm")
        if same_kind and (index is None or dev.index == index):
            return dev
    return None


def device_named(name: str) -> DeviceInfo:
    """The device a command line names ("cpu", "cuda", "cuda:1"), or a LoadoutError saying it is
    not on this machine."""
    from core.errors import LoadoutError

    found = pick_device(name, discover_devices())
    if found is not None:
        return found
    raise LoadoutError(
        f"no {name} device here",
        why="it was not found on this machine",
        fix="Use cpu as the device, or check the GPU driver",
        code="no_device",
    )
