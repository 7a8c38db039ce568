"""Devices and probes, VRAM policy, MemoryManager, pinned memory, streams, interrupt."""
