"""The network calling conventions moved to :mod:`core.sampling.network` (the test run uses them
too); this name stays for the generation code that imports it from here."""

from core.sampling.network import FLUX_DEFAULT_GUIDANCE, NetworkAdapter

__all__ = ["FLUX_DEFAULT_GUIDANCE", "NetworkAdapter"]
