"""Virtual graphs (``Graph::createVirtualGraph``): a range of a graph's tiles as a graph.

>>> import ipukit as ipu
>>> g = ipu.Graph(ipu.IPUModel(num_ipus=2, tiles_per_ipu=4).create_device().target)
>>> ipu1 = g.create_virtual_graph(4, 8)
>>> v = ipu1.add_variable(ipu.FLOAT, [2], "v")
>>> ipu1.set_tile_mapping(v, 1)
>>> v.graph is g, g.get_tile_mapping(v)[5], ipu1.target.num_tiles
(True, [(0, 2)], 4)
"""

from __future__ import annotations

import dataclasses
import numbers

from .errors import TileMappingError
from .tensor import Tensor
from .vertex import VertexRef


class VirtualTiles:
    """What makes a :class:`~ipukit.graph.Graph` a virtual graph (graph.py's
    ``VirtualGraph`` is this and a Graph): a range of its parent's tiles.

    Its ``target`` has ``upper - lower`` tiles (one IPU's worth or whole IPUs); tile ``t``
    here is tile ``lower + t`` of the parent. Everything else is the parent's.
    """

    def __init__(self, parent, lower_tile: int, upper_tile: int):  # noqa: D107
        base = parent.target
        ok = all(isinstance(t, numbers.Integral) for t in (lower_tile, upper_tile)) and \
            0 <= lower_tile < upper_tile <= base.num_tiles
        if not ok:
            raise TileMappingError(
                f"create_virtual_graph({lower_tile!r}, {upper_tile!r}): the tile range must "
                f"satisfy 0 <= lower < upper <= {base.num_tiles} (the parent's tiles)"
            )
        lower, upper = int(lower_tile), int(upper_tile)
        tpi = base.tiles_per_ipu
        if base.ipu_of_tile(lower) == base.ipu_of_tile(upper - 1):
            target = dataclasses.replace(base, num_ipus=1, tiles_per_ipu=upper - lower)
        elif lower % tpi == 0 and upper % tpi == 0:
            target = dataclasses.replace(base, num_ipus=(upper - lower) // tpi)
        else:
            raise TileMappingError(
                f"create_virtual_graph({lower}, {upper}) spans part of more than one IPU "
                f"({tpi} tiles each); give tiles of one IPU or whole IPUs "
                f"(lower and upper multiples of {tpi})"
            )
        self.__dict__["_parent"] = parent.root
        self.__dict__["_offset"] = parent._offset + lower
        self.target, self.lower_tile, self.upper_tile = target, lower, upper

    def __getattr__(self, name):  # storage, compute sets, vertices, streams: the parent's
        return getattr(self.__dict__["_parent"], name)

    @property
    def root(self):
        return self.__dict__["_parent"]

    def _parent_tile(self, tile, what) -> int:
        return self._offset + self.target.check_tile(tile, what)

    def add_compute_set(self, name: str = ""):
        return self.root.add_compute_set(name)

    def add_vertex(self, cs, vertex_class, connections=None, tile=None) -> VertexRef:
        if type(tile) is int and 0 <= tile < self.target.num_tiles:  # the common case
            return self.root.add_vertex(cs, vertex_class, connections, self._offset + tile)
        ref = self.root.add_vertex(cs, vertex_class, connections)
        if tile is not None:
            self.set_tile_mapping(ref, tile)
        return ref

    def set_tile_mapping(self, tensor_or_vertex, tile: int) -> None:
        root = self.root
        if (type(tensor_or_vertex) is Tensor and tensor_or_vertex.graph is root
                and type(tile) is int and 0 <= tile < self.target.num_tiles):
            return root.set_tile_mapping(tensor_or_vertex, self._offset + tile)
        if isinstance(tensor_or_vertex, VertexRef):
            vid = self._vertex(tensor_or_vertex, "set_tile_mapping")
            what = lambda: self.root.describe_vertex(vid)  # noqa: E731
        else:
            t = self._own(tensor_or_vertex, "set_tile_mapping")
            what = lambda: f"tensor '{t.name}' (in a virtual graph)"  # noqa: E731
        self.root.set_tile_mapping(tensor_or_vertex, self._parent_tile(tile, what))

    def get_tile_mapping(self, tensor: Tensor, throw_on_incomplete: bool = True
                         ) -> list[list[tuple[int, int]]]:
        mapping = self.root.get_tile_mapping(tensor, throw_on_incomplete)
        lo, hi = self._offset, self._offset + self.target.num_tiles
        outside = [t for t, iv in enumerate(mapping) if iv and not lo <= t < hi]
        if outside:
            raise TileMappingError(
                f"tensor '{tensor.name}' has elements on tile {outside[0]} of the parent "
                f"graph, outside this virtual graph's tiles {lo}..{hi - 1}; copy it to a "
                "tensor of this virtual graph first (ipu.Copy)"
            )
        return mapping[lo:hi]

    def __repr__(self):
        return (f"VirtualGraph(tiles {self._offset}..{self._offset + self.target.num_tiles - 1}"
                f" of the parent)")

