"""A user's run: a script run as ``__main__`` and the reports and figures written
at exit (its settings and the clock it reads are in ``_core``)."""
