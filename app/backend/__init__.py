"""The backend: one worker QThread that owns the engine, and the GUI thread's handle on it.

- :mod:`~app.backend.engine`: :class:`Engine`, plain Python over ``core`` (runs on the worker);
- :mod:`~app.backend.worker`: :class:`Worker`, the QObject that relays engine calls as signals;
- :mod:`~app.backend.backend`: :class:`Backend`, the GUI side (requests, busy state, interrupt);
- :mod:`~app.backend.messages`: the frozen records that cross between the two threads;
- :mod:`~app.backend.monitor` and :mod:`~app.backend.fit`: memory sampling and fit estimates.
"""
