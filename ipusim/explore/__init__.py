"""The exploration layer: the facade run again, one way or another.

A sweep's design points (``design_point``) and the what-if analysis
(``what_if``) each simulate a measured work under other settings; they need
no torch, so a sweep's workers and a report's verdict import only ipusim.
"""
