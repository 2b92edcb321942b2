"""A user's run: a script run as ``__main__``, its settings, the simulated clock
the script may read, and the reports and figures written at exit."""
