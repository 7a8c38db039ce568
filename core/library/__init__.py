"""The model library behind the browser: where models live, and an index of them read header-only.

- :mod:`~core.library.sources`: model folders of ComfyUI (``models/*``, ``extra_model_paths.yaml``)
  and A1111 installs, and plain folders, as :class:`ModelRoot` objects;
- :mod:`~core.library.index`: :class:`LibraryIndex`, whose ``scan()`` lists the roots and fills in
  :class:`Entry` rows live, with progress and an interrupt check;
- :mod:`~core.library.cache`: :class:`InspectCache`, inspect records kept between runs;
- :mod:`~core.library.query`: search, filter, sort and group entries.
"""

from core.library.cache import InspectCache
from core.library.entry import Entry
from core.library.index import LibraryIndex, ScanProgress
from core.library.query import (
    FolderKey,
    filter_entries,
    group_by_folder,
    group_by_kind,
    search,
    sort_entries,
)
from core.library.sources import (
    ModelRoot,
    a1111_roots,
    comfyui_roots,
    detect_install,
    parse_extra_model_paths,
    roots_for,
)

__all__ = [
    "Entry",
    "FolderKey",
    "InspectCache",
    "LibraryIndex",
    "ModelRoot",
    "ScanProgress",
    "a1111_roots",
    "comfyui_roots",
    "detect_install",
    "filter_entries",
    "group_by_folder",
    "group_by_kind",
    "parse_extra_model_paths",
    "roots_for",
    "search",
    "sort_entries",
]
