"""The network adapter lives in :mod:`core.sampling.network` (the test run uses it too); this name
stays for the generation code that imports it from here."""

from core.sampling.network import NetworkAdapter

__all__ = ["NetworkAdapter"]
