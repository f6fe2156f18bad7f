"""IPU targets: ``poplar::IPUModel``, ``poplar::Target`` and ``poplar::Device``.

The presets carry the constants of Graphcore's IPUModel as far as public material shows
them (see the docs' table): Mk1 ``ipu1``, Mk2 ``ipu2`` (the default) and ``bow``. The
host link of ``ipu1``/``ipu2`` is calibrated to the IPUModel's tut6 profile (6 B/cycle);
``bow`` charges one IPU's share of a Bow-2000's 100 GbE RoCE host link (``ipukit/cost.py``).

>>> import ipukit as ipu
>>> t = ipu.IPUModel("ipu2").create_device().target
>>> t.num_tiles, t.num_worker_contexts, t.exchange_bytes_per_cycle, t.host_link_bytes_per_cycle
(1472, 6, 4, 6.0)
>>> ipu.IPUModel(num_ipus=2, tiles_per_ipu=4).create_device().target.num_tiles
8
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from . import cost
from .errors import IpuError, TileMappingError

KiB = 1024

# (tiles per IPU, bytes per tile, tile clock in Hz) per preset.
PRESETS = {
    "ipu1": (1216, 256 * KiB, 1.600e9),
    "ipu2": (1472, 624 * KiB, 1.330e9),
    "bow": (1472, 624 * KiB, 1.850e9),
}

@dataclass(frozen=True)
class Target:
    """What a graph is compiled for (``poplar::Target``): tiles, memory, clock, links."""

    version: str
    num_ipus: int
    tiles_per_ipu: int
    bytes_per_tile: int
    clock_hz: float
    num_worker_contexts: int = 6
    exchange_bytes_per_cycle: int = 4
    sync_cycles: int = cost.SYNC_CYCLES
    #: Host link bytes per cycle (the preset's); None: ``HOST_LINK_BYTES_PER_SECOND``.
    host_link: float | None = None

    @property
    def num_tiles(self) -> int:
        return self.num_ipus * self.tiles_per_ipu

    @property
    def bytes_per_ipu(self) -> int:
        return self.tiles_per_ipu * self.bytes_per_tile

    @property
    def global_sync_cycles(self) -> int:
        """Cycles of a sync across IPUs (:func:`ipukit.cost.global_sync_cycles`)."""
        return cost.global_sync_cycles(self)

    @property
    def ipu_link_bytes_per_cycle(self) -> float:
        return cost.ipu_link_bytes_per_cycle(self)

    @property
    def host_link_bytes_per_cycle(self) -> float:
        """Host link bytes per cycle, one way: the IPUModel-calibrated 6 B/cycle on
        ``ipu1``/``ipu2``; on ``bow`` a quarter of a Bow-2000's 100 GbE (3.125 GB/s)."""
        return cost.host_link_bytes_per_cycle(self)

    @property
    def host_sync_cycles(self) -> int:
        return cost.host_sync_cycles(self)

    @property
    def flops_per_cycle(self) -> int:
        """fp32 FLOPs per cycle of one whole IPU (all tiles)."""
        return cost.flops_per_cycle(self)

    def ipu_of_tile(self, tile: int) -> int:
        return tile // self.tiles_per_ipu

    def cycles_to_us(self, cycles: float) -> float:
        return cycles / self.clock_hz * 1e6

    def check_tile(self, tile: int, what) -> int:
        """``tile`` as an int, or TileMappingError; ``what()`` names the tensor or vertex."""
        if type(tile) is int and 0 <= tile < self.num_tiles:
            return tile
        if not (isinstance(tile, numbers.Integral) and 0 <= tile < self.num_tiles):
            raise TileMappingError.tile_out_of_range(tile, what(), self)
        return int(tile)


@dataclass(frozen=True)
class Device:
    """An attached (emulated) device (``poplar::Device``)."""

    target: Target


class IPUModel:
    """An emulated IPU (``poplar::IPUModel``); ``create_device()`` gives a Device.

    ``version`` is ``"ipu1"`` (Mk1), ``"ipu2"`` (Mk2, default) or ``"bow"``;
    ``tiles_per_ipu`` makes a small teaching target (e.g. 4 tiles).
    """

    def __init__(self, version: str = "ipu2", num_ipus: int = 1, tiles_per_ipu=None):
        if version not in PRESETS:
            raise IpuError.unknown_version(version, PRESETS)
        default_tiles, self.bytes_per_tile, self.clock_hz = PRESETS[version]
        self.version = version
        self.num_ipus = _positive(num_ipus, "num_ipus")
        self.tiles_per_ipu = _positive(default_tiles if tiles_per_ipu is None else tiles_per_ipu,
                                       "tiles_per_ipu")

    def create_device(self) -> Device:
        return Device(Target(self.version, self.num_ipus, self.tiles_per_ipu,
                             self.bytes_per_tile, self.clock_hz,
                             host_link=cost.HOST_LINK_BYTES_PER_CYCLE[self.version]))


def _positive(value, name: str) -> int:
    if isinstance(value, bool) or not (isinstance(value, numbers.Integral) and value >= 1):
        raise IpuError.not_positive(name, value)
    return int(value)
