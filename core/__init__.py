"""Loadout's engine: Qt-free model reading, detection, loading, patching and memory management."""
