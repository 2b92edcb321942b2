"""The analysis layer: figures read off a simulation's events, each in one place.

``timeline`` holds :class:`Timeline`, the events with the methods that reach
every analysis: ``metrics`` (of the event table alone), ``headline`` (of a
whole timeline), ``pipeline_phases``, ``bottleneck`` and
``operator_breakdown``. It reads the layers below and runs nothing.
"""
