"""The engine layer: the SimPy model that runs per-IPU programs and records events.

Programs are data (``program``); ``system`` runs one long-lived process per
IPU with host links and sync groups; ``recorder`` keeps every event in typed
columns; ``step_replay`` records a call from an idle system as the last one,
shifted. It reads only the hardware layer.
"""
