"""The merged file's tensors, produced one at a time while the writer streams them.

Each input is memory-mapped; a key's tensors are read through the mapping, merged slice by slice on
the workspace's device into one output tensor, and handed to the writer; once written, the pages
of the inputs it read are given back (``SafetensorsFile.drop_pages``), so the process holds at
most a few tensors of any model, never a whole one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from core.files.model_file import TensorIndex
from core.files.safetensors import SafetensorsFile
from core.loading.convert_file import cast_tensor
from core.merging.arithmetic import merge_values
from core.merging.recipe import MergeMethod
from core.merging.workspace import Workspace, bytes_per_element


@dataclass(frozen=True)
class KeyPlan:
    """One tensor of the output: A's key, the keys it is computed from (one per model; only A's
    for a tensor copied unmerged) and the ratio for it."""

    key: str
    sources: tuple[str, ...]
    ratio: float = 1.0

    @property
    def merged(self) -> bool:
        return len(self.sources) > 1


class Source:
    """One model's tensors through its mapping(s) (a split model: one per shard)."""

    def __init__(self, index: TensorIndex) -> None:
        shards: dict[str, Path] | None = index.extra.get("shards")
        if shards is None:
            one = SafetensorsFile(index.path, header=index.header)
            self._file_of: Callable[[str], SafetensorsFile] = lambda key: one
            self._files = [one]
        else:
            files = {p: SafetensorsFile(p) for p in index.extra["shard_files"]}
            self._file_of = lambda key: files[shards[key]]
            self._files = list(files.values())

    def tensor(self, key: str) -> torch.Tensor:
        return self._file_of(key).tensor(key)

    def drop(self, key: str) -> None:
        self._file_of(key).drop_pages(key)

    def close(self) -> None:
        for f in self._files:
            f.close()


def cast_values(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Float32 merge results in the output dtype; fp8 clamped to its range (``loadout convert``'s
    rule), not turned into NaN."""
    if dtype.itemsize == 1 and dtype.is_floating_point:
        limit = torch.finfo(dtype).max
        return values.clamp_(-limit, limit).to(dtype)
    return values.to(dtype)


class MergedTensors(Mapping[str, torch.Tensor]):
    """The output's tensors by key, in A's order, each computed when the writer asks for it."""

    def __init__(
        self,
        method: MergeMethod,
        plans: Sequence[KeyPlan],
        sources: Sequence[Source],
        dtypes: Mapping[str, torch.dtype],
        space: Workspace,
        check: Callable[[], None] | None = None,
    ) -> None:
        self.method, self.sources, self.dtypes, self.space = method, sources, dtypes, space
        self._plans = {p.key: p for p in plans}
        self._check = check
        self._last: KeyPlan | None = None
        self.slices = 0  # slices computed (more than the merged keys when a tensor was split)

    def __iter__(self) -> Iterator[str]:
        return iter(self._plans)

    def __len__(self) -> int:
        return len(self._plans)

    def __getitem__(self, key: str) -> torch.Tensor:
        self.release()
        plan = self._plans[key]
        self._last = plan
        a = self.sources[0].tensor(plan.sources[0])
        dtype = self.dtypes[key]
        if not plan.merged:  # A's own tensor: written straight from the mapping, or cast
            return a if a.dtype == dtype else cast_tensor(a, dtype)
        inputs = [a] + [s.tensor(k) for s, k in zip(self.sources[1:], plan.sources[1:], strict=True)]
        return self._merge(plan, inputs, dtype)

    def _merge(self, plan: KeyPlan, inputs: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
        flat = [t.reshape(-1) for t in inputs]
        out = torch.empty(flat[0].numel(), dtype=dtype)
        per = bytes_per_element([t.element_size() for t in flat], dtype.itemsize, len(flat) == 3)
        step = self.space.elements(per)
        for begin in range(0, out.numel(), step):
            if self._check is not None:
                self._check()
            part = [t[begin : begin + step] for t in flat]
            c = part[2] if len(part) == 3 else None
            values = merge_values(self.method, plan.ratio, part[0], part[1], c, self.space.device)
            out[begin : begin + step].copy_(cast_values(values, dtype))
            self.slices += 1
        return out.view(inputs[0].shape)

    def release(self) -> None:
        """Give back the pages of the inputs the last tensor read (it has been written)."""
        plan, self._last = self._last, None
        if plan is None:
            return
        for source, key in zip(self.sources, plan.sources, strict=False):
            source.drop(key)
