"""Placement lives in :mod:`core.session.placement` (the session builds it); re-exported here for
the window's settings code."""

from core.session.placement import MemoryView, Placement, PlacementConfig, PlacementInfo

__all__ = ["MemoryView", "Placement", "PlacementConfig", "PlacementInfo"]
