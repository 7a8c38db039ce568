"""The window's placement controls: the device line, Load to GPU / Offload on the selected
model, and pointing the memory plot and the fit estimate at the placement's device.

A mixin of :class:`~app.gui.main_window.MainWindow` (it uses the window's panels and backend);
it reads only :class:`PlacementInfo` snapshots, never a session object.
"""

from __future__ import annotations

import sys

from app.backend.placement import PlacementInfo
from app.gui.errors import Friendly
from core.memory.policy import reserve_bytes


class PlacementControls:
    """Mixed into the window, which provides ``placement``, ``has_gpu``, ``backend``, ``monitor``,
    ``settings``, ``models`` and the panels these methods use."""

    def _device_text(self) -> str:
        p = self.placement
        if p.active:
            return f"{p.label} · {p.vram_state}"
        return "No GPU found: CPU and system RAM" if not self.has_gpu else f"CPU only ({p.reason})"

    def _on_placement(self, info: PlacementInfo) -> None:
        """New memory settings took effect on the worker: show the device they placed on."""
        self.placement = info
        self.place_action.setEnabled(info.active)
        self.offload_action.setEnabled(info.active)
        self._watch_placement()
        self.monitor.reset_peaks()
        self.memory_panel.set_placement(info)
        self.testrun_panel.device = info.device
        self.device_label.setText(self._device_text())
        self.details.fit.reserve = self._reserve()
        self.details.fit.refresh()

    def _watch_placement(self) -> None:
        """Point the monitor and the fit estimate at the placement's device: the snapshot's memory
        figures (plain numbers) are all the GUI thread reads; the monitor probes with its own."""
        memory = self.placement.memory
        self.monitor.watch(memory)  # sampled by the plot's timer
        self.details.fit.headroom = memory.headroom
        self.details.fit.headroom_fixed = memory.headroom_fixed

    def _selected_loaded(self) -> str | None:
        key = self.loaded_panel.selected_key()
        return key if key is not None else next((m.key for m in self.models if m.is_main), None)

    def _selected_role(self) -> str | None:
        return self.loaded_panel.selected_role() if self.loaded_panel.selected_key() else None

    def place_selected(self) -> None:
        key = self._selected_loaded()
        if not self.placement.active:
            self.show_message(
                Friendly("No GPU", self.placement.reason + " Models compute on the CPU.", "info")
            )
        elif key is None:
            self.show_message(Friendly("Nothing loaded", "Load a model first (double-click it).", "info"))
        else:
            self.backend.place(key, self._selected_role())

    def offload_selected(self) -> None:
        key = self._selected_loaded()
        if key is not None and self.placement.active:
            self.backend.offload(key, self._selected_role())

    def _reserve(self) -> int:
        device = self.monitor.device
        if device is None:
            return 0
        return reserve_bytes(device, device.total_bytes, sys.platform, self.settings.memory_settings())
