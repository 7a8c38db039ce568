"""Qwen-Image's MMDiT (ComfyUI's ``qwen_image`` architecture): its config (``config``) and the
transformer (``network``). Its package ``core.archs.qwen_image`` holds the rest: the key maps of
the layouts it ships in, its calling convention, its prompt encoding and its activation-memory
models.
"""

from core.models.qwen_image.config import QwenImageConfig
from core.models.qwen_image.network import QwenImageDiT

__all__ = ["QwenImageConfig", "QwenImageDiT"]
