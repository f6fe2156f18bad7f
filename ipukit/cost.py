"""The cost model: the one place where bytes, FLOPs and syncs become cycles.

Every cycle count in the kit comes from here: the compiler's supersteps (on-tile
exchange, internal and external sync, IPU-Link and host-link transfers), the pipeline
runner's compute (FLOPs of the NumPy layers), its link copies and syncs, the sharded
collectives and the replicas' all-reduce. Poplar does not publish most of these numbers;
each constant says where it comes from, and an approximation is marked (kit convention).

Functions read the module's constants when they are called, so changing one constant
(say ``IPU_LINK_BYTES_PER_SECOND``) moves every count that depends on it.

>>> import ipukit as ipu
>>> from ipukit import cost
>>> t = ipu.IPUModel("ipu2", num_ipus=2).create_device().target
>>> cost.exchange_cycles(4000, t), cost.link_cycles(4000, t), cost.global_sync_cycles(t)
(1000, 392, 40)
>>> cost.ring_bytes("allreduce", 1000, 4), cost.ring_steps("allreduce", 4)
(1500, 6)
>>> cost.ring_step_cycles(t), cost.ring_cycles("allreduce", 1000, 4, t)  # 6 x 40 + 147
(40, 387)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import IpuError

#: Cycles of an internal (one-IPU) sync (kit convention: Poplar does not publish it).
SYNC_CYCLES = 20
#: Latency of an external sync per hop between IPUs (poplibs ``setGlobalSyncLatency``).
GLOBAL_SYNC_SECONDS_PER_HOP = 15e-9
#: One IPU-Link: 128 Gbit/s at 85 % efficiency (poplibs' test model of link bandwidth).
IPU_LINK_BYTES_PER_SECOND = 128e9 / 8 * 0.85
#: Host link of the ``bow`` preset, per IPU, one way. A Bow-2000 reaches its host server
#: over 100 GbE RoCEv2 through its IPU-Gateway, shared by its 4 IPUs (Bow-2000 datasheet:
#: "Host-Link - PCIe Gen4 RoCEv2 NIC/SmartNIC Interface"; Bow Pod DA build guide: a 100GbE
#: RoCEv2 NIC in the server, the IPU-Gateway "disaggregates the server(s) and the four
#: IPUs ... across a RoCE network"). The figure is the line rate, 100 Gbit/s = 12.5 GB/s
#: each way, split evenly (/ 4) when all 4 IPUs stream (kit convention: no protocol
#: overhead, no IPU using another's share).
HOST_LINK_BYTES_PER_SECOND = 100e9 / 8 / 4
#: Host link of the ``ipu1`` and ``ipu2`` presets, in bytes per tile-clock cycle, calibrated
#: to Graphcore's IPUModel: its Poplar tutorial 6 profile (10000x1000 on model-ipu2, tut6
#: README) moves 40,044,000 B in 6,663,550.8 host exchange cycles (99.7 % of 6,681,766),
#: about 6 B/cycle (8 GB/s at 1.33 GHz); ipu1 uses the same per-cycle rate (kit convention).
IPU_MODEL_HOST_LINK_BYTES_PER_CYCLE = 6.0
#: Host link per preset in bytes per cycle; None means ``HOST_LINK_BYTES_PER_SECOND``.
HOST_LINK_BYTES_PER_CYCLE = {"ipu1": IPU_MODEL_HOST_LINK_BYTES_PER_CYCLE,
                             "ipu2": IPU_MODEL_HOST_LINK_BYTES_PER_CYCLE, "bow": None}
#: Streaming Memory (remote buffers): the DDR of the IPU-Machine, "Up to 256GB Streaming
#: Memory" beside "3.6GB In-Processor-Memory" per Bow-2000 (Bow-2000 datasheet, overview).
#: It hangs off the IPU-Gateway, which the IPU-M2000 BMC user guide's block diagram links
#: to the IPUs by PCIe Gen4 x8 (as read by vengineer.hatenablog.com, 2023-01-23): 8 lanes
#: x 16 GT/s x 128/130 = 15.75 GB/s each way. Graphcore publishes no remote-buffer
#: bandwidth: the kit charges that line rate (kit convention: no protocol overhead, no DDR
#: limit, each IPU its own link).
STREAMING_MEMORY_BYTES_PER_SECOND = 8 * 16e9 * 128 / 130 / 8
#: Fixed latency of one remote-buffer copy (a PCIe round trip to DDR), 1 µs (kit convention:
#: Graphcore publishes none).
STREAMING_MEMORY_LATENCY_SECONDS = 1e-6
#: Fixed cost of one host synchronisation (one ``Engine.run`` call), about 10 µs (kit
#: convention).
HOST_SYNC_SECONDS = 10e-6
#: fp32 FLOPs per tile per cycle (AMP unit: 16 MACs = 32 FLOPs) for the NumPy runner's
#: layers (kit convention).
FLOPS_PER_CYCLE_PER_TILE = 32
#: Bytes a tile copies per cycle in an on-tile memcpy (kit convention).
COPY_BYTES_PER_CYCLE = 8


def _ceil_div(nbytes, rate):
    if isinstance(nbytes, np.ndarray):
        return np.ceil(nbytes / rate).astype(np.int64)
    return math.ceil(nbytes / rate) if nbytes else 0


# -- syncs --------------------------------------------------------------------------------
def sync_cycles(target) -> int:
    """An internal sync: the tiles of the IPUs of one compute set or copy agree to go on."""
    return int(getattr(target, "sync_cycles", SYNC_CYCLES))


def global_sync_cycles(target, num_ipus: int | None = None) -> int:
    """An external sync of ``num_ipus`` IPUs (default: all of the target's; poplibs
    ``setGlobalSyncLatency``: 15 ns per hop, there and back, over ``1 + num_ipus // 4``
    hops)."""
    hops = 1 + ((num_ipus or target.num_ipus) // 2) // 2
    return math.ceil(GLOBAL_SYNC_SECONDS_PER_HOP * target.clock_hz * hops * 2)


def host_sync_cycles(target) -> int:
    """The host synchronisation of one ``Engine.run`` call (about 10 µs)."""
    return math.ceil(round(HOST_SYNC_SECONDS * target.clock_hz, 6))  # 13,300 on ipu2


# -- bandwidths ---------------------------------------------------------------------------
def ipu_link_bytes_per_cycle(target) -> float:
    return IPU_LINK_BYTES_PER_SECOND / target.clock_hz


def host_link_bytes_per_cycle(target) -> float:
    """Host link bytes per cycle, one way: the preset's calibrated rate if it has one (the
    IPUModel's 6 B/cycle on ``ipu1``/``ipu2``), else ``HOST_LINK_BYTES_PER_SECOND`` (a
    Bow IPU's share of its Bow-2000's 100 GbE: 3.125 GB/s, 1.69 B/cycle at 1.85 GHz)."""
    link = getattr(target, "host_link", None)
    return link if link is not None else HOST_LINK_BYTES_PER_SECOND / target.clock_hz


def streaming_memory_bytes_per_cycle(target) -> float:
    """Streaming Memory bytes per cycle, one way (15.75 GB/s: 8.5 B/cycle at 1.85 GHz)."""
    return STREAMING_MEMORY_BYTES_PER_SECOND / target.clock_hz


def remote_cycles(nbytes, target) -> int:
    """One copy of ``nbytes`` between tiles and Streaming Memory (a remote buffer): the
    fixed latency plus the bytes over the IPU's link to the IPU-Gateway.

    >>> import ipukit as ipu
    >>> t = ipu.IPUModel("ipu2").create_device().target
    >>> remote_cycles(0, t), remote_cycles(4000, t)  # 1,330 + ceil(4000 / 11.84)
    (0, 1668)
    """
    if not nbytes:
        return 0
    latency = math.ceil(round(STREAMING_MEMORY_LATENCY_SECONDS * target.clock_hz, 6))
    return latency + _ceil_div(nbytes, streaming_memory_bytes_per_cycle(target))


def exchange_cycles(nbytes, target):
    """On-IPU exchange: a tile sends or receives ``exchange_bytes_per_cycle`` (4) bytes a
    cycle. ``nbytes`` may be an array (one entry per tile)."""
    return _ceil_div(nbytes, target.exchange_bytes_per_cycle)


def copy_cycles(nbytes):
    """An on-tile memcpy of ``nbytes`` (an array per tile, or one number)."""
    return _ceil_div(nbytes, COPY_BYTES_PER_CYCLE)


def link_cycles(nbytes, target) -> int:
    """``nbytes`` over one IPU-Link."""
    return _ceil_div(nbytes, ipu_link_bytes_per_cycle(target))


def host_cycles(nbytes, target) -> int:
    """``nbytes`` over the host link, one way."""
    return _ceil_div(nbytes, host_link_bytes_per_cycle(target))


# -- compute ------------------------------------------------------------------------------
def flops_per_cycle(target) -> int:
    """fp32 FLOPs per cycle of one whole IPU (all its tiles)."""
    return FLOPS_PER_CYCLE_PER_TILE * target.tiles_per_ipu


def flops_cycles(flops, target) -> int:
    """Cycles of ``flops`` spread over all tiles of one IPU (the NumPy runner's layers)."""
    return math.ceil(flops / flops_per_cycle(target))


# -- collectives --------------------------------------------------------------------------
#: Ring steps of a collective over R ranks, and the share of the bytes each rank sends.
RING = {"allreduce": (2, 2), "reducescatter": (1, 1), "allgather": (1, 1)}
#: Latency of one step of a ring collective: a neighbour exchange over the IPU-Links that
#: ends in an external sync of the two neighbouring IPUs. A step costs one hop of poplibs'
#: ``setGlobalSyncLatency`` there and back, 2 x 15 ns: 40 cycles on ipu2 (kit convention:
#: Graphcore publishes no per-step figure for GCL's rings).
RING_STEP_SECONDS = 2 * GLOBAL_SYNC_SECONDS_PER_HOP


def ring_steps(kind: str, ranks: int) -> int:
    """Steps of a ring ``kind`` over ``ranks``: 2(R−1) for an all-reduce (a reduce-scatter
    then an all-gather), R−1 for either half."""
    if kind not in RING:
        raise IpuError.unknown_ring(kind, RING)
    return RING[kind][0] * (ranks - 1)


def ring_bytes(kind: str, nbytes: int, ranks: int) -> int:
    """Bytes each rank sends in a ring ``kind`` of an ``nbytes`` tensor: each of the
    ring's steps moves one R-th of it, so 2(R−1)/R of it for an all-reduce."""
    return math.ceil(RING[kind][1] * (ranks - 1) * nbytes / ranks)


def ring_step_cycles(target) -> int:
    """The fixed latency of one ring step (``RING_STEP_SECONDS``), in cycles."""
    return math.ceil(round(RING_STEP_SECONDS * target.clock_hz, 6))


def ring_cycles(kind: str, nbytes: int, ranks: int, target) -> int:
    """A ring ``kind`` of an ``nbytes`` tensor over ``ranks`` IPUs (GCL's
    ``allReduceWithinReplica``, ``allReduceCrossReplica``, ``reduceScatterCrossReplica``,
    ``allGatherCrossReplica``): the bandwidth term, each rank's :func:`ring_bytes` over one
    IPU-Link, plus the latency term, :func:`ring_steps` x :func:`ring_step_cycles`. Small
    tensors are latency-bound: the steps cost the same whatever they carry.

    >>> import ipukit as ipu
    >>> t = ipu.IPUModel("ipu2", num_ipus=4).create_device().target
    >>> ring_cycles("allreduce", 4, 4, t)  # 6 steps x 40 cycles + ceil(6 / 10.2) cycles
    241
    >>> ring_cycles("allreduce", 4_000_000, 4, t)  # 240 + ceil(6,000,000 / 10.2)
    587005
    >>> ring_cycles("allgather", 4_000_000, 1, t)  # one rank: no ring, no cost
    0
    """
    return CostModel.from_target(target).ring(kind, nbytes, ranks)


def collective_cycles(busiest_bytes: int, target) -> int:
    """A collective between IPUs that is not a ring (a broadcast from, or a reduce onto,
    one root): one external sync, then the busiest IPU's bytes over one IPU-Link (kit
    convention)."""
    return global_sync_cycles(target) + link_cycles(busiest_bytes, target)


@dataclass(frozen=True)
class CostModel:
    """The rates of one target as plain numbers (the pipeline runner's view of cost.py);
    ``from_target`` reads them from this module, a test may pass its own (a hand-made
    model charges no ring-step latency unless given ``ring_step_cycles``)."""

    flops_per_cycle: float
    link_bytes_per_cycle: float
    host_bytes_per_cycle: float
    sync_cycles: float
    ring_step_cycles: float = 0.0

    @classmethod
    def from_target(cls, target) -> CostModel:
        return cls(flops_per_cycle(target), ipu_link_bytes_per_cycle(target),
                   host_link_bytes_per_cycle(target), global_sync_cycles(target),
                   ring_step_cycles(target))

    def compute(self, flops: float) -> float:
        return math.ceil(flops / self.flops_per_cycle)

    def link(self, nbytes: int) -> float:
        return _ceil_div(nbytes, self.link_bytes_per_cycle)

    def host(self, nbytes: int) -> float:
        return _ceil_div(nbytes, self.host_bytes_per_cycle)

    def ring(self, kind: str, nbytes: int, ranks: int) -> float:
        """A ring collective over ``ranks`` (:func:`ring_cycles`): its steps' latency plus
        each rank's bytes over one link."""
        return (ring_steps(kind, ranks) * self.ring_step_cycles
                + self.link(ring_bytes(kind, nbytes, ranks)))
