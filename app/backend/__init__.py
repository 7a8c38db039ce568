"""The backend: one worker QThread that owns the session, and the GUI thread's handle on it.

- :mod:`~app.backend.worker`: :class:`TaskRunner`, a generic QObject that runs submitted jobs on
  the worker thread and relays their progress, results and errors as signals;
- :mod:`~app.backend.backend`: :class:`Backend`, the GUI side: one method per operation (a job
  over the :class:`core.session.Session`), busy state, interrupt, results routed to typed signals;
- :mod:`~app.backend.messages`: the frozen records that cross between the two threads;
- :mod:`~app.backend.monitor` and :mod:`~core.memory.fit`: memory sampling and fit estimates.
"""
