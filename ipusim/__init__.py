"""ipusim: a discrete-event simulator of Graphcore IPU systems.

Describe the work (stages with costs), how it runs (batching, replication,
pipelining, sync pattern) and the system (IPU preset, host links), and get a
timeline of every event with the figures derived from it. Knows nothing of
PopTorch; ``poptorch_shim`` builds the work from real torch models.
"""
from ipusim.cost.cost_model import CALIBRATED_MK2, DEFAULT, PROFILES, CostModel
from ipusim.cost.matmul_plan import amp_vertex_cycles
from ipusim.cost.operator_model import operator_cycles
from ipusim.cost.program import OperatorCycles
from ipusim.cost.work import Cost, Execution, Kernel, KernelKind, Stage, Work
from ipusim.engine.sync_groups import SyncPattern
from ipusim.hardware import BOW, MK1_GC2, MK2_GC200, PRESETS, IPUSpec, SystemSpec, system_spec
from ipusim.plan.run_config import Offload, RunConfig
from ipusim.plan.setting_names import SettingNames
from ipusim.simulation import Simulation, Timeline, job_timeline, simulate

__all__ = [
    "BOW", "CALIBRATED_MK2", "DEFAULT", "MK1_GC2", "MK2_GC200", "PRESETS", "PROFILES",
    "Cost", "CostModel", "Execution", "IPUSpec", "Kernel", "KernelKind", "Offload",
    "OperatorCycles", "RunConfig", "SettingNames",
    "Simulation", "Stage", "SyncPattern", "SystemSpec", "Timeline", "Work", "job_timeline",
    "amp_vertex_cycles", "operator_cycles", "simulate", "system_spec",
]
