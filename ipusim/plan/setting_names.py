"""ipusim's names for a run's settings: the one place that says how the simulator
words a setting, in a report's advice (:data:`SETTING_WORDS`, or a front end's words
through :class:`SettingNames`) and in the run checks' errors (:func:`error_names`).

A setting is named by its ``RunConfig`` field (``gradient_accumulation``...); a
front end (the PopTorch shim) gives its own words for the same keys, and is the
one place of those.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

#: How the run checks' errors name the settings by default (:func:`error_names`).
ERROR_WORDS: Mapping[str, str] = MappingProxyType({
    "gradient_accumulation": "gradient_accumulation",
    "device_iterations": "device_iterations",
    "replicas": "replicas",
    "pipelined": "pipelined execution",
    "num_ipus": "num_ipus",
})


def error_names(names: Mapping[str, str] | None) -> dict[str, str]:
    """How the run checks' errors name the settings: ipusim's (:data:`ERROR_WORDS`),
    or the caller's where ``names`` gives them."""
    return {**ERROR_WORDS, **(names or {})}


#: How ipusim words a run's settings where a report names one (the verdict's
#: advice): its own names, ``RunConfig``'s fields. Each is a ``str.format``
#: template, given ``value``: the value the advice suggests, where it suggests one.
SETTING_WORDS: Mapping[str, str] = MappingProxyType({
    "device_iterations": "RunConfig.device_iterations",
    # An autoregressive run's lever: the steps of its loop run on the device in one call.
    "on_device_loop": "running {value} steps of the loop on the device in each call",
    "gradient_accumulation": "RunConfig.gradient_accumulation",
    "replicas": "RunConfig.replicas",
    "synthetic_data": "RunConfig.synthetic_data=True",
    "sync_pattern": "RunConfig.sync_pattern=SyncPattern.{value.name}",
    "output_period": "RunConfig.output_period",
    "pipelined": "Execution.PIPELINED",
    "parallel_phased": "Execution.PARALLEL_PHASED",
    "stage_placement": "Stage.ipu, the IPU each model stage runs on",
    "optimizer_location": "RunConfig.offload.optimizer",
    "recompute": "RunConfig.recompute",
    "micro_batch": "Work.micro_batch_size",
    "allow_out_of_memory": "simulating without memory_per_ipu's check",
    # The data loader whose throughput the caller measured (loader_items_per_s).
    "async_loader": "an asynchronous data loader",
    "loader_workers": "worker processes loading in parallel",
    "loader_miss_sleep": "polling without a pause while the loader's buffer is empty",
    "loader_epoch_start": ("workers that persist across epochs, loading on past the end of an "
                           "epoch, a larger buffer or an early preload"),
})


@dataclass(frozen=True)
class SettingNames:
    """How reports name a run's settings: in the verdict's advice and in a sweep table.

    By default ipusim's own names (:data:`SETTING_WORDS`; a sweep table's column
    of a setting is the setting's name). A front end whose users set these
    through its own API gives its words for them instead, and the verdict, the
    text summary, the HTML report, the autoReport directory and the sweep
    report all word the settings its way, as :meth:`RunConfig.validate`'s
    ``names`` words its errors.

    ``words`` maps a setting (a key of :data:`SETTING_WORDS`) to how advice
    names it, a ``str.format`` template of ``value``; ``columns`` maps a
    setting to the column of a sweep table that holds it.
    """

    words: Mapping[str, str] = field(default_factory=dict)
    columns: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted((set(self.words) | set(self.columns)) - set(SETTING_WORDS))
        if unknown:
            raise ValueError(f"Unknown setting(s) {unknown} in SettingNames; the settings a "
                             f"report names are {sorted(SETTING_WORDS)}")

    def __reduce__(self):
        """Pickled as plain dicts (a read-only mapping, ``MappingProxyType``, does not
        pickle), so a model holding its names pickles (``torch.save`` of a PopTorch
        model), read-only again once unpickled."""
        return _read_only_names, (dict(self.words), dict(self.columns))

    def word(self, setting: str, value: object = None) -> str:
        """How advice names ``setting`` (suggesting ``value``, where given)."""
        return self.words.get(setting, SETTING_WORDS[setting]).format(value=value)

    def phrase(self, setting: str, value: object = None) -> str:
        """``setting`` given ``value``, as advice says it: its words where they show the
        value (a template of ``value``), else its words and ``= value`` (a number)."""
        template = self.words.get(setting, SETTING_WORDS[setting])
        if "{value" in template or value is None:
            return template.format(value=value)
        return f"{template} = {value}"

    def column(self, setting: str) -> str:
        """The column of a sweep table that holds ``setting``."""
        return self.columns.get(setting, setting)

    def to_dict(self) -> dict:
        """The caller's words as JSON-ready data (empty for ipusim's own)."""
        return {"words": dict(self.words), "columns": dict(self.columns)}

    @classmethod
    def from_dict(cls, data: Mapping | None) -> SettingNames:
        """The inverse of :meth:`to_dict` (None: ipusim's own names)."""
        data = data or {}
        return cls(dict(data.get("words", {})), dict(data.get("columns", {})))


def _read_only_names(words: dict[str, str], columns: dict[str, str]) -> SettingNames:
    """:class:`SettingNames` of ``words`` and ``columns``, each read-only (unpickling)."""
    return SettingNames(MappingProxyType(words), MappingProxyType(columns))
