"""Loadout's desktop front end (PySide6) and command line."""
