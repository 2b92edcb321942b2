"""The verdict: what limits a run, proven by simulating it without, in words.

What limits the run is the diagnosis of :mod:`ipusim.explore.diagnosis`: the
recorded calls simulated again once per change (:mod:`ipusim.explore.what_if`),
the change a user can make that gains most naming the limit. This module
words it: a headline saying what limits the run and, in numbers, what
lifting it gains; the advice of the tutorials for that limit; and every
change tried, fastest first. The advice names the settings by ipusim's names,
or by the caller's (a :class:`~ipusim.plan.run_config.SettingNames`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ipusim.analysis.bottleneck import Bottleneck
from ipusim.analysis.timeline import Timeline
from ipusim.cost.work import Execution
from ipusim.engine.sync_groups import SyncPattern
from ipusim.explore.diagnosis import SIGNIFICANT_SPEEDUP, Diagnosis, diagnose
from ipusim.explore.what_if import WhatIf, WhatIfs
from ipusim.plan.memory import excess
from ipusim.plan.setting_names import SettingNames


@dataclass(frozen=True)
class Verdict(Bottleneck):
    """What limits the run, why, what to try, and what each change tried gains."""

    headline: str
    advice: tuple[str, ...]
    what_if: tuple[dict, ...] = ()   # each change tried, fastest first (see what_if_entry)
    left_out: tuple[dict, ...] = ()  # {"change", "reason"} of the changes the run cannot make
    # How far the run is over the IPUs' memory, in words, where it does not fit (simulated
    # anyway, as debug.allowOutOfMemory asks): what every headline says first.
    does_not_fit: str | None = None
    # No change tried gains 5%: the run is balanced at its limit, ``kind`` what bounds it.
    balanced: bool = False

    def to_dict(self) -> dict:
        """A JSON-ready dict (advice, what-ifs and changes left out as lists)."""
        out = asdict(self)
        for key in ("advice", "what_if", "left_out"):
            out[key] = list(out[key])
        return out

    @property
    def proof(self) -> dict | None:
        """The what-if of the verdict's limit: the run simulated without it."""
        return next((w for w in self.what_if if w["limit"] == self.kind), None)


def bottleneck(timeline: Timeline, loader_items_per_s: float | None = None,
               names: SettingNames | None = None) -> Verdict:
    """The verdict on ``timeline``; ``loader_items_per_s`` is the data loader's own
    throughput, ``names`` how the advice names the settings (default: ipusim's names).

    The one function every output's verdict comes from: it simulates the
    recorded calls once per change, so a caller that shows the verdict in
    several places computes it once and hands it on."""
    names = names or SettingNames()
    diagnosis = diagnose(timeline, loader_items_per_s)
    found = diagnosis.figures
    headline, advice = _ADVICE[found.kind](timeline, found, names, diagnosis.what_ifs)
    over = excess(timeline.memory_per_ipu())
    balanced = _balanced(diagnosis) if diagnosis.balanced else ""
    headline = " ".join(part for part in (over, balanced, headline, _proof(diagnosis)) if part)
    return Verdict(**asdict(found), headline=headline, does_not_fit=over,
                   balanced=diagnosis.balanced, advice=tuple(advice),
                   what_if=tuple(what_if_entry(w, names)
                                 for w in diagnosis.what_ifs.tried),
                   left_out=tuple({"change": c, "reason": r}
                                  for c, r in diagnosis.what_ifs.left_out))


# What bounds a run balanced at its limit, by the kind the diagnosis names.
_BOUNDS = {"data_loader": "the data loader bounds it",
           "host_round_trip": "the host's round trip between calls bounds it",
           "host_link": "host I/O bounds it", "sync": "waits in syncs bound it",
           "compute": "the IPUs' compute bounds it"}


def _balanced(diagnosis: Diagnosis) -> str:
    """A run that no change tried speeds up: balanced at its limit, and what bounds it."""
    best = diagnosis.what_ifs.best(actionable=False)
    gain = "" if best is None else f" (the most, {best.change}, {best.speedup:.2f}x)"
    return (f"Balanced at its limit: no change tried gains "
            f"{SIGNIFICANT_SPEEDUP - 1:.0%}{gain}; {_BOUNDS[diagnosis.kind]}.")


def _proof(diagnosis: Diagnosis) -> str:
    """The limit in numbers: what the run would gain without it."""
    proof, recorded = diagnosis.proof, diagnosis.what_ifs.items_per_s
    if proof is None or proof.speedup <= 1:
        return ""
    return (f"With {proof.change}, the same samples would take {1 - 1 / proof.speedup:.0%} "
            f"less time ({recorded:,.0f} to {proof.items_per_s:,.0f} items/s, "
            f"{proof.speedup:.2f}x).")


def what_if_entry(what_if: WhatIf, names: SettingNames) -> dict:
    """One change tried, as ``profile.json`` keeps it under ``verdict.what_if``: the
    change, the call that makes it (``option``, in the caller's words; None where no
    setting does) and the number it sets (None where it sets none, or sets a pattern
    the option names), its throughput, step time and speed-up. A change that alters
    other settings besides its own names each of them in its words."""
    option = (names.word(what_if.setting, what_if.value) if what_if.setting else None)
    value = what_if.value if isinstance(what_if.value, int) else None
    besides = [names.phrase(setting, other) for setting, other in what_if.also]
    change = what_if.change + (f" (and {', '.join(besides)})" if besides else "")
    return {"change": change, "option": option, "value": value,
            "limit": what_if.limit, "actionable": what_if.actionable,
            "keeps_batch": what_if.keeps_batch,
            "items_per_s": what_if.items_per_s, "step_time_ms": what_if.step_time_ms,
            "speedup": what_if.speedup}


def _data_loader(timeline: Timeline, n: Bottleneck,
                 names: SettingNames,
                 tried: WhatIfs) -> tuple[str, list[str]]:
    return (f"The data loader ({n.loader_items_per_s:,.0f} items/s) is slower than the "
            f"simulated IPUs ({n.device_items_per_s:,.0f} items/s): the IPUs wait for data.", [
        f"Use the asynchronous mode: {names.word('async_loader')} loads the next batches in a "
        "worker process while the IPUs run.",
    ] + [
        f"{more.change.capitalize()} ({names.phrase(more.setting, more.value)}) gains "
        f"{more.speedup:.2f}x: each step then loads more samples per host round trip."
        for more in tried.tried if more.limit == "host_round_trip"
        and more.speedup >= SIGNIFICANT_SPEEDUP
    ] + [
        f"Adjust the number of workers ({names.word('loader_workers')}).",
        "In asynchronous mode with few elements per step, try "
        f"{names.word('loader_miss_sleep')}.",
        f"If throughput drops at the start of each epoch: {names.word('loader_epoch_start')}.",
    ])


def _round_trip_advice(timeline: Timeline, n: Bottleneck, names: SettingNames) -> str:
    if timeline.run.autoregressive:
        steps = timeline.run.device_iterations * 4
        return (f"Each call to the model costs a host round trip ({n.host_call_share:.0%} of "
                "the time here), and each call needs the previous call's outputs: running "
                f"the loop's steps on the device ({names.word('on_device_loop', steps)}) pays "
                "it once for all of them.")
    return (f"Each call to the model costs a host round trip ({n.host_call_share:.0%} of "
            f"the time here): more device iterations ({names.word('device_iterations')}) run "
            "more of the loop on the IPU per call and pay it once.")


def _synthetic_advice(names: SettingNames) -> str:
    return (f"Compare with synthetic data ({names.word('synthetic_data')}): the difference is "
            "the cost of the host-to-device stream copies and their syncs with the host.")


def _host_round_trip(timeline: Timeline, n: Bottleneck,
                     names: SettingNames,
                     tried: WhatIfs) -> tuple[str, list[str]]:
    return (f"The host round trip between calls is the bottleneck: the IPUs spend "
            f"{n.host_call_share:.0%} of the time waiting for the host between calls and "
            f"{n.host_io_share:.0%} in stream copies.", [
        _round_trip_advice(timeline, n, names),
        "A larger global batch (micro-batch size, gradient accumulation, replicas) also "
        "spreads each round trip over more samples.",
        _synthetic_advice(names),
    ])


def _host_link(timeline: Timeline, n: Bottleneck, names: SettingNames,
               tried: WhatIfs) -> tuple[str, list[str]]:
    per_link = timeline.system.ipus_per_host_link
    if n.host_link_occupancy >= n.host_io_share:
        headline = (f"The host link is the bottleneck: the busiest link is occupied "
                    f"{n.host_link_occupancy:.0%} of the time and the IPUs spend "
                    f"{n.host_io_share:.0%} of theirs in stream copies.")
    else:
        headline = (f"Host I/O is the bottleneck: the IPUs spend {n.host_io_share:.0%} of "
                    f"the time in stream copies (the busiest host link is occupied "
                    f"{n.host_link_occupancy:.0%} of the time).")
    advice = [_round_trip_advice(timeline, n, names)] if n.host_call_share >= 0.05 else []
    return (headline, [
        _synthetic_advice(names),
        f"{per_link} IPUs share each host link here ({timeline.run.replicas} replica(s)): fewer "
        "replicas per host link, or more hosts / IPU-M2000s, gives each replica more bandwidth.",
        "Replication stops scaling once the shared host link is saturated: more replicas only "
        "queue on the link (in the data-loading tutorial 4 replicas reach 136k items/s with "
        "synthetic data but 36k with real data).",
        "Move fewer bytes per sample: send compact inputs (uint8 or half) and preprocess on the "
        f"IPU; return fewer outputs ({names.word('output_period')}).",
    ] + advice)


def _pipeline_bubble(timeline: Timeline, n: Bottleneck,
                     names: SettingNames,
                     tried: WhatIfs) -> tuple[str, list[str]]:
    p, m = timeline.plan.pipeline_depth, timeline.plan.micro_batches_per_run
    advice = [
        f"The bubble of {m} micro-batches through {p} pipeline stages is (P-1)/(N+P-1) = "
        f"{n.bubble_fraction:.0%}: raise the gradient accumulation "
        f"({names.word('gradient_accumulation')}) to widen the main phase."
        if timeline.run.training else
        f"The bubble of {m} micro-batches through {p} pipeline stages is (P-1)/(N+P-1) = "
        f"{n.bubble_fraction:.0%}: run more of the loop's steps on the device per call "
        f"({names.word('on_device_loop', max(p, 4 * timeline.run.device_iterations))})."
        if timeline.run.autoregressive else
        f"The bubble of {m} micro-batches through {p} pipeline stages is (P-1)/(N+P-1) = "
        f"{n.bubble_fraction:.0%}: raise the device iterations "
        f"({names.word('device_iterations')}).",
        "Fewer pipeline stages (fewer IPUs per replica, more replicas) also shrink the bubble.",
    ]
    advice.append(_balance_advice(timeline))
    return (f"The pipeline bubble leaves {n.bubble_fraction:.0%} of the pipeline slots idle "
            "in ramp-up and ramp-down.", advice)


def _balance_advice(timeline: Timeline) -> str:
    balance = timeline.stage_balance()
    if balance is None:
        return "Balance the stages so that each IPU takes about the same time per micro-batch."
    if balance.balanced:
        return (f"The stages are balanced (the slowest takes {balance.ratio:.2f}x the fastest "
                "per micro-batch): moving layers between them will not help.")
    why = ("the slowest stage sets the pace of every pipeline cycle" if timeline.run.execution
           is Execution.PIPELINED else "the next stage cannot start until it ends")
    return (f"Rebalance the stages: stage {balance.slowest} takes {balance.slowest_us:,.1f} µs "
            f"per micro-batch, {balance.ratio:.1f}x stage {balance.fastest}; {why}.")


def _sync(timeline: Timeline, n: Bottleneck, names: SettingNames,
          tried: WhatIfs) -> tuple[str, list[str]]:
    run = timeline.run
    advice = _execution_advice(timeline, names)
    advice.append(_balance_advice(timeline))
    return (f"The IPUs spend {n.sync_wait_share:.0%} of the time waiting in syncs "
            f"(sync pattern {run.sync_pattern.value}).", advice)


def _execution_advice(timeline: Timeline, names: SettingNames) -> list[str]:
    """What the execution and the sync pattern could do instead, where they let IPUs wait."""
    run = timeline.run
    advice = []
    if run.execution is Execution.SHARDED and timeline.work.ipus_per_replica > 1:
        advice.append("In sharded execution one IPU computes while the others wait: pipeline "
                      f"the model ({names.word('pipelined')}) with gradient accumulation.")
    if run.sync_pattern is SyncPattern.FULL:
        advice.append("Under SyncPattern.Full every host transfer stalls every IPU: "
                      f"{names.word('sync_pattern', SyncPattern.SINGLE_PIPELINE)} lets each IPU "
                      "meet the host on its own while the others compute.")
    if run.execution is Execution.PHASED and timeline.work.ipus_per_replica > 1:
        advice.append("Serial phased execution streams each phase's state in while its IPUs "
                      f"wait: {names.word('parallel_phased')} with SyncPattern.ReplicaAndLadder "
                      "streams the next phase into the other half of the IPUs while this one "
                      "computes (ping-pong).")
    elif run.execution is Execution.PARALLEL_PHASED and \
            run.sync_pattern is not SyncPattern.REPLICA_AND_LADDER:
        advice.append("SyncPattern.ReplicaAndLadder lets the two halves of the IPUs alternate "
                      "between host I/O and compute, the ping-pong parallel phased execution "
                      "is made for.")
    return advice


def _compute(timeline: Timeline, n: Bottleneck, names: SettingNames,
             tried: WhatIfs) -> tuple[str, list[str]]:
    if n.utilisation >= 0.5:
        headline = f"Compute-bound: the IPUs compute {n.utilisation:.0%} of the time."
    else:
        headline = (f"No single overhead stands out: the IPUs compute {n.utilisation:.0%} of "
                    f"the time, with {n.host_io_share + n.host_call_share:.0%} on the host, "
                    f"{n.sync_wait_share:.0%} in syncs and the rest in copies or idle.")
    return (headline, [
        f"Throughput scales with more replicas ({names.word('replicas')}) as long as the "
        "host link and the data loader keep up: check both after replicating.",
        "For training, prefer a larger global batch over more device iterations: it raises "
        "the IPU utilisation, device iterations only amortise the host round trip.",
        "Larger micro-batches and half precision raise the arithmetic efficiency per IPU.",
    ])


def _imbalance(timeline: Timeline, n: Bottleneck, names: SettingNames,
               tried: WhatIfs) -> tuple[str, list[str]]:
    # Per IPU, as the balancing what-if weighs it: model stages that share an IPU
    # (BERT's head shares the embedding's) add up there.
    stages = timeline.plan.stages
    per_ipu: dict[int, float] = {}
    for index, micro_batch_us in timeline.stage_times_us().items():
        per_ipu[stages[index].ipu] = per_ipu.get(stages[index].ipu, 0.0) + micro_batch_us
    slowest = max(per_ipu, key=per_ipu.get)
    mean = sum(per_ipu.values()) / len(per_ipu)
    held = ", ".join(f"{k} ({stage.name})" for k, stage in enumerate(stages)
                     if stage.ipu == slowest)
    idle = timeline.per_ipu()["utilisation"]
    idlest = int(idle.idxmin())
    return (f"The pipeline stages are out of balance: IPU {slowest} (model stage {held}) "
            f"computes {per_ipu[slowest]:,.1f} µs per micro-batch against a mean of "
            f"{mean:,.1f} µs over the IPUs, and sets the pace of every pipeline cycle; "
            f"IPU {idlest} computes only {idle[idlest]:.0%} of the time.", [
        f"Move layers off IPU {slowest} onto the lighter IPUs "
        f"({names.word('stage_placement')}) until each computes about {mean:,.1f} µs.",
        _balance_advice(timeline),
        "Recomputation on the lighter stages, or a different split of the model, moves "
        "memory and time between the IPUs.",
    ])


def _optimizer_state(timeline: Timeline, n: Bottleneck,
                     names: SettingNames,
                     tried: WhatIfs) -> tuple[str, list[str]]:
    where = "on chip" if timeline.run.offload.optimizer else "off chip"
    return (f"Where the optimizer state lives limits the run: keeping it {where} is faster.", [
        f"Keep the optimizer state {where} ({names.word('optimizer_location')}) while the "
        "memory allows it.",
    ])


def _unused_ipus(timeline: Timeline, n: Bottleneck,
                 names: SettingNames,
                 tried: WhatIfs) -> tuple[str, list[str]]:
    used, available = timeline.num_ipus, timeline.system.num_ipus
    return (f"The run uses {used} of the system's {available} IPUs.", [
        f"Replicate the model over the idle IPUs ({names.word('replicas')}), then check that "
        "the host link and the data loader keep up.",
    ])


def _ipu_links(timeline: Timeline, n: Bottleneck, names: SettingNames,
               tried: WhatIfs) -> tuple[str, list[str]]:
    return ("Copies over the IPU-Links (activations between the stages, the gradients' "
            "all-reduce) limit the run.", [
        "Place the stages so that fewer or smaller tensors cross between IPUs.",
        "Fewer IPUs per replica, or accumulating more micro-batches per weight update "
        f"({names.word('gradient_accumulation')}), spreads the all-reduce over more samples.",
    ])


def _step_overhead(timeline: Timeline, n: Bottleneck,
                   names: SettingNames,
                   tried: WhatIfs) -> tuple[str, list[str]]:
    return ("The fixed costs of each weight update (the update itself, the gradients' "
            "all-reduce, streaming phases in and out) limit the run.", [
        "Accumulate more micro-batches per weight update "
        f"({names.word('gradient_accumulation')}): each update's fixed costs are then "
        "spread over more samples.",
        "Keeping the optimizer state where it is cheapest to update, and sharding it over "
        "the replicas, shortens each update.",
    ] + [line for line in _execution_advice(timeline, names) if timeline.run.execution.phased])


_ADVICE = {"data_loader": _data_loader, "step_overhead": _step_overhead, "host_link": _host_link,
           "host_round_trip": _host_round_trip, "sync": _sync,
           "compute": _compute, "pipeline_bubble": _pipeline_bubble,
           "imbalance": _imbalance, "optimizer_state": _optimizer_state,
           "unused_ipus": _unused_ipus, "ipu_links": _ipu_links}
