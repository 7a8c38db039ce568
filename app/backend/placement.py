"""Placement lives in :mod:`core.session.placement` (the session builds it); re-exported here for
the window's settings code."""

from core.session.placement import MemoryFigures, Placement, PlacementConfig, PlacementInfo

__all__ = ["MemoryFigures", "Placement", "PlacementConfig", "PlacementInfo"]
