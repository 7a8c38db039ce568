"""The Qt window. Only this package (and app.gui.*) imports PySide6."""
