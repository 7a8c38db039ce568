"""The decoder-LLM towers' records (``LlmTowerSpec``, ``Z_IMAGE_QWEN3``, ``LUMINA2_GEMMA2``,
``Z_IMAGE_TOWER``, ...), by the import path the text layer uses: they live in the architecture
package ``core.archs.llm`` (``towers``), where conventions name them without importing the text
layer, and are reached here through the catalog."""

from typing import Any

from core.archs.catalog import find_in_packages


def __getattr__(name: str) -> Any:
    return find_in_packages("towers", name)
