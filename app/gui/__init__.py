"""The Qt window: panels over the backend (``app.backend``), which owns the engine in its QThread.

Only ``app.gui`` and ``app.backend`` import PySide6; ``core`` never does.
"""
