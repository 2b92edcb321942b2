"""``poptorch.TensorLocationSettings`` and ``opts.TensorLocations``: where
activations, weights, optimizer state and accumulators are stored (on chip or
in streaming memory, sharded across replicas, loaded through IO tiles).

Kept apart from :mod:`poptorch_shim.options` because it is a self-contained
group with its own public settings class; ``Options`` holds one
``_TensorLocationOptions`` and reports its locations as PopART dicts.
"""
import copy

from poptorch_shim._options.store import OptionsGroup, OptionSpec, count, require_arg, setter

__all__ = ["TensorLocationSettings"]

_TENSOR_KINDS = ("activation", "weight", "optimizer", "accumulator")


class TensorLocationSettings(OptionsGroup):
    """Where one kind of tensor is stored, for ``opts.TensorLocations``.

    >>> poptorch.TensorLocationSettings().useOnChipStorage(False)

    Unset values keep PopART's defaults: on chip (``on_chip`` is None),
    off-chip only from 2 elements, replicated tensor sharding off and from
    8192 elements, compute tiles for loading and storing.
    """
    _path = "TensorLocationSettings"
    _specs = (OptionSpec("on_chip", None, (bool,), "useOnChipStorage", nullable=True),
              OptionSpec("replicated_tensor_sharding", False, (bool,),
                         "useReplicatedTensorSharding"),
              count("min_elements_for_off_chip", "minElementsForOffChip", 2, 0),
              count("min_elements_for_rts", "minElementsForReplicatedTensorSharding", 8192, 0),
              OptionSpec("io_tiles_to_load", False, (bool,), "useIOTilesToLoad"),
              OptionSpec("io_tiles_to_store", False, (bool,), "useIOTilesToStore"))
    _popart_names = {"on_chip": "onChip",
                     "replicated_tensor_sharding": "useReplicatedTensorSharding",
                     "min_elements_for_off_chip": "minElementsForOffChip",
                     "min_elements_for_rts": "minElementsForReplicatedTensorSharding",
                     "io_tiles_to_load": "useIOTilesToLoad",
                     "io_tiles_to_store": "useIOTilesToStore"}

    @setter
    def useOnChipStorage(self, use: bool | None = True) -> "TensorLocationSettings":
        """Keep the tensors on chip (True) or in streaming memory (False);
        None leaves the choice to PopART."""
        self._set("on_chip", use)
        return self

    @setter
    def useReplicatedTensorSharding(self, use: bool = True) -> "TensorLocationSettings":
        """Shard the tensors across replicas (weights and optimizer state)."""
        self._set("replicated_tensor_sharding", use)
        return self

    @setter
    def minElementsForOffChip(self, min_elements: int) -> "TensorLocationSettings":
        """Keep tensors with fewer elements than this on chip."""
        self._set("min_elements_for_off_chip", min_elements)
        return self

    @setter
    def minElementsForReplicatedTensorSharding(self, min_elements: int) -> "TensorLocationSettings":
        """Shard only tensors with at least this many elements."""
        self._set("min_elements_for_rts", min_elements)
        return self

    @setter
    def useIOTilesToLoad(self, use: bool = True) -> "TensorLocationSettings":
        """Load the tensors through IO tiles rather than compute tiles."""
        self._set("io_tiles_to_load", use)
        return self

    @setter
    def useIOTilesToStore(self, use: bool = True) -> "TensorLocationSettings":
        """Store the tensors through IO tiles rather than compute tiles."""
        self._set("io_tiles_to_store", use)
        return self

    def toDict(self) -> dict:
        """The settings changed from PopART's defaults, under PopART's names."""
        return {self._popart_names[k]: v for k, v in self._changed().items()}

    def __getitem__(self, popart_name: str):
        """A changed setting by its PopART name, as PopTorch's options hold a
        location (``opts.TensorLocations.location_weight["onChip"]``); KeyError
        for one left at PopART's default."""
        return self.toDict()[popart_name]


class _TensorLocationOptions(OptionsGroup):
    """Where activations, weights, optimizer state and accumulators live
    (``opts.TensorLocations``)."""
    _path = "Options.TensorLocations"
    _specs = (count("num_io_tiles", "numIOTiles", default=0, minimum=0),) + tuple(
        OptionSpec(f"location_{kind}", None, (TensorLocationSettings,),
                   f"set{kind.capitalize()}Location", nullable=True) for kind in _TENSOR_KINDS)

    @setter
    def numIOTiles(self, num_tiles: int) -> "_TensorLocationOptions":
        """Reserve this many tiles per IPU for I/O instead of compute."""
        require_arg(self._path, "numIOTiles", "num_tiles", num_tiles, int)
        if num_tiles % 2 or not 32 <= num_tiles <= 192:
            # PopTorch asserts here: an AssertionError with these words.
            raise AssertionError(f"numIOTiles must be an even number between 32 and 192 "
                                 f"({self._path}.numIOTiles: got {num_tiles}).")
        self._set("num_io_tiles", num_tiles)
        return self

    def _set_location(self, kind: str, location: TensorLocationSettings):
        method = f"set{kind.capitalize()}Location"
        require_arg(self._path, method, "location", location, TensorLocationSettings)
        # Keep a private copy so later changes to the caller's object do not leak in.
        self._set(f"location_{kind}", copy.deepcopy(location))
        return self

    @setter
    def setActivationLocation(self, location: TensorLocationSettings) -> "_TensorLocationOptions":
        return self._set_location("activation", location)

    @setter
    def setWeightLocation(self, location: TensorLocationSettings) -> "_TensorLocationOptions":
        return self._set_location("weight", location)

    @setter
    def setOptimizerLocation(self, location: TensorLocationSettings) -> "_TensorLocationOptions":
        return self._set_location("optimizer", location)

    @setter
    def setAccumulatorLocation(self, location: TensorLocationSettings) -> "_TensorLocationOptions":
        return self._set_location("accumulator", location)

    def location(self, kind: str) -> TensorLocationSettings | None:
        """The settings given for ``kind`` (activation, weight, optimizer or
        accumulator), or None if never set."""
        if kind not in _TENSOR_KINDS:
            raise ValueError(f"{self._path}.location: kind must be one of "
                             f"{list(_TENSOR_KINDS)}, got {kind!r}.")
        return self._store.get(f"location_{kind}")
