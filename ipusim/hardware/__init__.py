"""The hardware layer: IPUs and the systems they sit in, each figure with its source.

Nothing below it; every other layer reads these frozen specs.
"""
from ipusim.hardware.specs import (
    BOW,
    GB,
    MK1_GC2,
    MK2_GC200,
    PRESETS,
    TFLOPS,
    IPUSpec,
    SystemSpec,
    system_spec,
)

__all__ = ["BOW", "GB", "MK1_GC2", "MK2_GC200", "PRESETS", "TFLOPS", "IPUSpec", "SystemSpec",
           "system_spec"]
