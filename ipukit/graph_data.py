"""A graph and its programs as plain data, and back (kit convention: the form in which a
learner's kernel hands a graph to the grader's judge, which rebuilds and runs it itself).

:func:`to_plain` describes what a :class:`~ipukit.graph.Graph` holds, as numbers, strings,
lists, dicts and NumPy arrays (:mod:`ipukit.grading.plain` carries it as JSON):

* ``"pools"``: per element type (``"float32"``, ...), its variables in the order they were
  added (``name``, ``shape``, a constant's ``values``, the tile ``mapping`` as rows
  ``[tile, begin, end]`` of flat element ranges), so that every tensor keeps its addresses;
* ``"compute_sets"``: their names, in order;
* ``"vertices"``: per vertex its compute set (index), ``codelet`` (the kit codelet's name,
  ``"ipukit.grading.lesson01.Scale"``, or the recipe of a codelet ``popops.map`` or
  ``popops.reduce`` generated: :func:`ipukit.poplibs.popops.codelet_recipe`), ``tile``
  (-1: not mapped), ``perf`` (an estimate or None), ``fields`` (field name -> tensor
  region) and ``state`` (State field -> values);
* ``"initial_values"``, ``"streams"``, ``"remote_buffers"``, ``"host_writes"`` and
  ``"host_reads"``; a tensor region is ``{"dtype", "offset", "shape", "strides"}``, or
  ``{"dtype", "addresses"}`` (a concatenation) or ``{"dtype", "regions"}`` (a RegionList);
* ``"programs"``: the program tree, one ``{"Kind": ...}`` per node (Sequence, Execute,
  Copy, Repeat, RepeatWhileTrue, If, PrintTensor).

Only codelets of the kit travel, by name; :func:`from_plain` resolves them in the kit's own
registry (:func:`kit_codelets`: the Vertex classes of ``ipukit`` modules imported in the
process that rebuilds, never a class the data names elsewhere). A codelet the learner wrote
is refused, unless the caller names it in ``stand_ins`` (a learner class -> the kit codelet
with the same fields that takes its place: its compute is then checked apart).
:func:`from_plain` rebuilds with the graph's own calls (``add_variable``,
``set_tile_mapping``, ``add_vertex``, ...), so every check Poplar's API makes applies, and
refuses malformed data with a :class:`GraphDataError` naming what is wrong.

>>> import ipukit as ipu
>>> from ipukit.grading.lesson01 import Scale
>>> g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=2).create_device().target)
>>> x, y = g.add_variable(ipu.FLOAT, [4], "x"), g.add_variable(ipu.FLOAT, [4], "y")
>>> g.set_tile_mapping(x, 0); g.set_tile_mapping(y, 1)
>>> cs = g.add_compute_set("scale")
>>> _ = g.add_vertex(cs, Scale, {"x": x, "out": y}, tile=1)
>>> g.create_host_write("x", x); g.create_host_read("y", y)
>>> data = to_plain(g, [ipu.Execute(cs)])
>>> data["vertices"][0]["codelet"], data["programs"]
('ipukit.grading.lesson01.Scale', [{'Execute': 0}])
>>> g2, progs = from_plain(data, g.target)
>>> eng = ipu.Engine(g2, progs[0]); eng.load(ipu.IPUModel(tiles_per_ipu=2).create_device())
>>> eng.write_tensor("x", [1, 2, 3, 4]); eng.run(); eng.read_tensor("y").tolist()
[2.0, 4.0, 6.0, 8.0]
"""

from __future__ import annotations

import math
import numbers
import sys

import numpy as np

from . import program as P
from .errors import IpuError
from .graph import DataStream, Graph, RemoteBuffer
from .print_tensor import PrintTensorFmt
from .target import Target
from .tensor import RegionList, Tensor
from .vertex import Vertex

#: The format's name and version, the first key of every description.
FORMAT = "ipukit.graph/1"
#: Most elements all the description's tensor regions may hold together (a region of stride
#: 0 describes many elements in a few numbers), and most vertices, variables or program
#: nodes of one kind (kit convention: far above any exercise's graph; data past them is
#: refused before anything is built for it).
MAX_ELEMENTS = 1 << 22
MAX_ITEMS = 100_000
_TYPES = {"float32": np.float32, "float16": np.float16, "int32": np.int32,
          "uint32": np.uint32, "bool": np.bool_}


class GraphDataError(IpuError):
    """A graph description that cannot be rebuilt (malformed, or naming what the kit does
    not have), or a graph that cannot be described (a codelet not of the kit)."""


# -- the kit's codelets --------------------------------------------------------------------
def codelet_name(cls) -> str | None:
    """``"module.Class"`` of a kit codelet (a Vertex class defined in an ``ipukit`` module
    and found there under its name), else None.

    >>> from ipukit.grading.common import SumVertex
    >>> codelet_name(SumVertex)
    'ipukit.grading.common.SumVertex'
    """
    module = getattr(cls, "__module__", "") or ""
    if not (module == "ipukit" or module.startswith("ipukit.")):
        return None
    found = sys.modules.get(module)
    name = cls.__qualname__
    return f"{module}.{name}" if getattr(found, name, None) is cls else None


def kit_classes(base: type) -> dict[str, type]:
    """Every class of the kit under ``base`` (``base`` included) imported in this process,
    by :func:`codelet_name`."""
    found, todo = {}, [base]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        name = codelet_name(cls)
        if name is not None:
            found[name] = cls
    return found


def kit_codelets() -> dict[str, type]:
    """Every kit codelet imported in this process, by :func:`codelet_name`."""
    found = kit_classes(Vertex)
    found.pop(codelet_name(Vertex), None)
    return found


# -- to plain data ---------------------------------------------------------------------------
def to_plain(graph: Graph, programs, stand_ins: dict | None = None) -> dict:
    """``graph`` and ``programs`` (a program or a list of them) as plain data (see the
    module's docstring). ``stand_ins``: learner codelet class -> kit codelet class sent in
    its place. A codelet that is neither the kit's nor a stand-in is a GraphDataError."""
    if not isinstance(graph, Graph) or graph.root is not graph:
        raise GraphDataError(f"to_plain describes a Graph (the top-level one), got {graph!r}")
    programs = list(programs) if isinstance(programs, list | tuple) else [programs]
    codelets = {}
    for vid, cls in enumerate(graph.v_cls):
        if cls not in codelets:
            codelets[cls] = _sent_codelet(graph, vid, cls, stand_ins or {})
    return {
        "format": FORMAT,
        "pools": {str(dt): [_variable(graph, pool, var) for var in pool.variables]
                  for dt, pool in graph.pools.items()},
        "compute_sets": [cs.name for cs in graph.compute_sets],
        "vertices": [{"cs": graph.v_cs[v], "codelet": codelets[graph.v_cls[v]],
                      "tile": graph.v_tile[v], "perf": graph.v_perf[v],
                      "fields": {f: _region(t) for f, t in graph.v_conn[v].items()},
                      "state": {f: np.asarray(a) for f, a in graph.v_state[v].items()}}
                     for v in range(graph.num_vertices)],
        "initial_values": [[_region(t), np.asarray(a)] for t, a in graph.initial_values],
        "streams": [[s.name, str(s.dtype), s.n, s.to_device] for s in graph.streams.values()],
        "remote_buffers": [[b.name, str(b.dtype), b.num_elements, b.repeats,
                            b.rearrange_on_host, b.optimise_memory]
                           for b in graph.remote_buffers.values()],
        "host_writes": {k: _region(t) for k, t in graph.host_writes.items()},
        "host_reads": {k: _region(t) for k, t in graph.host_reads.items()},
        "programs": [_program(p) for p in programs],
    }


def _sent_codelet(graph, vid, cls, stand_ins) -> str | dict:
    if cls in stand_ins:
        return codelet_name(stand_ins[cls])
    from .poplibs import popops

    recipe = popops.codelet_recipe(cls)
    if recipe is not None:  # a codelet popops generated (popops.map, popops.reduce)
        return recipe
    name = codelet_name(cls)
    if name is None:
        raise GraphDataError(
            f"{graph.describe_vertex(vid)} runs codelet '{cls.__name__}', which is not one of "
            "the kit's: only the kit's codelets can be sent to the grader by name (a codelet "
            "you write is checked on its own where an exercise asks for one)")
    return name


def _variable(graph, pool, var) -> dict:
    t = Tensor(graph, pool.dtype, (var.start, (var.size,), (1,)), var.name)
    per_tile = graph.get_tile_mapping(t, throw_on_incomplete=False)
    rows = [[tile, b, e] for tile, pairs in enumerate(per_tile) for b, e in pairs]
    return {"name": var.name, "shape": list(var.shape),
            "values": None if var.values is None else np.asarray(var.values),
            "mapping": np.asarray(rows, dtype=np.int64).reshape(-1, 3)}


def _region(t: Tensor) -> dict:
    head = {"dtype": str(t.dtype)}
    if isinstance(t, RegionList):
        return {**head, "regions": [[o, list(s), list(st)] for o, s, st in t.regions]}
    if t.strides is None:
        return {**head, "addresses": np.asarray(t.idx, dtype=np.int64)}
    return {**head, "offset": int(t.offset), "shape": list(t.shape),
            "strides": [int(s) for s in t.strides]}


def _end(x) -> dict:
    """A side of a Copy: a tensor region, a stream or a remote buffer."""
    if isinstance(x, DataStream):
        return {"stream": x.name}
    if isinstance(x, RemoteBuffer):
        return {"remote_buffer": x.name}
    return {"tensor": _region(x)}


def _program(p) -> dict:
    if isinstance(p, P.Sequence):
        return {"Sequence": [_program(q) for q in p.programs]}
    if isinstance(p, P.Execute):
        return {"Execute": p.cs.id}
    if isinstance(p, P.Copy):
        offset = p.offset if not isinstance(p.offset, Tensor) else {"tensor": _region(p.offset)}
        return {"Copy": [_end(p.src), _end(p.dst), offset]}
    if isinstance(p, P.Repeat):
        return {"Repeat": [p.count, _program(p.body)]}
    if isinstance(p, P.RepeatWhileTrue):
        return {"RepeatWhileTrue": [_program(p.cond), _region(p.predicate),
                                    _program(p.body)]}
    if isinstance(p, P.If):
        return {"If": [_region(p.predicate), _program(p.then), _program(p.else_)]}
    if isinstance(p, P.PrintTensor):
        return {"PrintTensor": [p.title, _region(p.tensor), vars(p.fmt)]}
    raise GraphDataError(f"a program of kind {type(p).__name__} cannot be described: the "
                         "kit's programs are Sequence, Execute, Copy, Repeat, "
                         "RepeatWhileTrue, If and PrintTensor")


# -- back to a graph -------------------------------------------------------------------------
def from_plain(data, target: Target) -> tuple[Graph, list]:
    """The graph and the list of programs that ``data`` (from :func:`to_plain`, or written
    by anyone: it is untrusted) describes, built on ``target`` with the kit's own calls;
    GraphDataError names anything malformed, unknown or out of range. The graph's own
    errors (a wrong field type, a tile that does not exist, ...) are raised as they are."""
    try:
        return _Builder(target).build(data)
    except (GraphDataError, IpuError):
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError,
            RecursionError) as exc:  # malformed data the checks above did not foresee
        raise GraphDataError(f"a graph description that cannot be read: "
                             f"{type(exc).__name__}: {str(exc)[:300]}") from None


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise GraphDataError(message)


def _int(x, what: str, lo: int = 0, hi: int | None = None) -> int:
    ok = isinstance(x, numbers.Integral) and not isinstance(x, bool)
    _need(ok and lo <= x and (hi is None or x < hi),
          f"{what} must be a whole number in {lo}..{'' if hi is None else hi - 1}, got {x!r}")
    return int(x)


def _list(x, what: str) -> list:
    _need(isinstance(x, list) and len(x) <= MAX_ITEMS,
          f"{what} must be a list of at most {MAX_ITEMS:,} items, got {type(x).__name__}")
    return x


def _dict(x, what: str) -> dict:
    _need(isinstance(x, dict) and len(x) <= MAX_ITEMS and all(isinstance(k, str) for k in x),
          f"{what} must be a dict with string keys, got {type(x).__name__}")
    return x


def _dtype(name, what: str) -> np.dtype:
    _need(isinstance(name, str) and name in _TYPES,
          f"{what}: element type {str(name)[:80]!r} is not one of {', '.join(_TYPES)}")
    return np.dtype(_TYPES[name])


def _shape(x, what: str) -> tuple:
    shape = tuple(_int(s, f"{what}: a dimension", 0, MAX_ELEMENTS + 1)
                  for s in _list(x, f"{what}: shape"))
    _need(math.prod(shape) <= MAX_ELEMENTS,
          f"{what}: shape {list(shape)} holds more than {MAX_ELEMENTS:,} elements")
    return shape


class _Builder:
    def __init__(self, target: Target):
        self.g = Graph(target)
        self.elements = 0  # in the regions read so far
        self.nodes = 0  # program nodes read so far

    def build(self, data):
        data = _dict(data, "a graph description")
        _need(data.get("format") == FORMAT,
              f"a graph description must start with format {FORMAT!r}, got "
              f"{str(data.get('format'))[:80]!r}")
        g = self.g
        for dt, variables in _dict(data["pools"], "pools").items():
            dtype = _dtype(dt, "a pool")
            for k, var in enumerate(_list(variables, f"the {dt} variables")):
                self._variable(dtype, _dict(var, f"{dt} variable {k}"))
        for name in _list(data["compute_sets"], "compute_sets"):
            g.add_compute_set(str(name))
        codelets = kit_codelets()
        for k, v in enumerate(_list(data["vertices"], "vertices")):
            self._vertex(k, _dict(v, f"vertex {k}"), codelets)
        for k, (t, a) in enumerate(_list(data["initial_values"], "initial_values")):
            g.set_initial_value(self.tensor(t, f"initial value {k}"), a)
        for name, dt, n, to_device in _list(data["streams"], "streams"):
            add = g.add_host_to_device_fifo if to_device else g.add_device_to_host_fifo
            add(str(name), _dtype(dt, f"stream {str(name)[:80]!r}"), n)
        for name, dt, n, repeats, rearrange, optimise in _list(data["remote_buffers"],
                                                               "remote_buffers"):
            g.add_remote_buffer(str(name), _dtype(dt, f"remote buffer {name!r}"), n, repeats,
                                bool(rearrange), bool(optimise))
        for name, t in _dict(data["host_writes"], "host_writes").items():
            g.create_host_write(name, self.tensor(t, f"host write {name!r}"))
        for name, t in _dict(data["host_reads"], "host_reads").items():
            g.create_host_read(name, self.tensor(t, f"host read {name!r}"))
        return g, [self.program(p) for p in _list(data["programs"], "programs")]

    def _variable(self, dtype, var) -> None:
        name = str(var["name"])
        what = f"variable '{name[:80]}'"
        shape = _shape(var["shape"], what)
        values = var["values"]
        if values is None:
            t = self.g.add_variable(dtype, list(shape), name)
        else:
            _need(isinstance(values, np.ndarray), f"{what}: values must be an array")
            t = self.g.add_constant(dtype, list(shape), values, name)
        rows = var["mapping"]
        _need(isinstance(rows, np.ndarray) and rows.dtype.kind in "iu" and rows.ndim == 2
              and rows.shape[1] == 3, f"{what}: mapping must be an array of [tile, begin, "
              "end] rows")
        flat, size = t.flatten(), t.num_elements()
        for tile, b, e in rows.tolist():
            _need(0 <= b <= e <= size, f"{what}: mapping [{tile}, {b}, {e}] is not a range "
                  f"of its {size:,} elements")
            self.g.set_tile_mapping(flat[b:e], tile)

    def _vertex(self, k, v, codelets) -> None:
        name = v["codelet"]
        if isinstance(name, dict):  # generated by popops from its recipe
            from .poplibs import popops

            try:
                codelets = {"": popops.codelet_from_recipe(name)}
            except IpuError as exc:
                raise GraphDataError(f"vertex {k}: {exc}") from None
            name = ""
        _need(isinstance(name, str) and name in codelets,
              f"vertex {k}: codelet {str(name)[:120]!r} is not one of the kit's codelets "
              f"(known here: {', '.join(sorted(codelets))[:400]})")
        cs = self.g.compute_sets[_int(v["cs"], f"vertex {k}: compute set", 0,
                                      len(self.g.compute_sets))]
        tile = _int(v["tile"], f"vertex {k}: tile", -1)
        fields = {f: self.tensor(t, f"vertex {k}: field '{f[:80]}'")
                  for f, t in _dict(v["fields"], f"vertex {k}: fields").items()}
        ref = self.g.add_vertex(cs, codelets[name], fields, None if tile < 0 else tile)
        if v["perf"] is not None:
            self.g.set_perf_estimate(ref, _int(v["perf"], f"vertex {k}: perf"))
        for f, a in _dict(v["state"], f"vertex {k}: state").items():
            self.g.set_initial_value(ref[f], a)

    def tensor(self, t, what: str) -> Tensor:
        """The tensor a region describes, every address inside its type's storage."""
        found = self._tensor(_dict(t, what), what)
        self.elements += found.num_elements()
        _need(self.elements <= MAX_ELEMENTS, f"{what}: the description's tensors hold more "
              f"than {MAX_ELEMENTS:,} elements together")
        return found

    def _tensor(self, t: dict, what: str) -> Tensor:
        dtype = _dtype(t.get("dtype"), what)
        pool = self.g.pools.get(dtype)
        size = 0 if pool is None else pool.size
        if "addresses" in t:
            idx = t["addresses"]
            _need(isinstance(idx, np.ndarray) and idx.dtype.kind in "iu"
                  and idx.size <= MAX_ELEMENTS, f"{what}: addresses must be an integer array")
            _need(idx.size == 0 or (idx.min() >= 0 and idx.max() < size),
                  f"{what}: addresses outside the {size:,} {dtype} elements of the graph")
            return Tensor(self.g, dtype, idx.astype(np.intp), what)
        if "regions" in t:
            regions = [self._layout(r, dtype, size, what) for r in _list(t["regions"], what)]
            return RegionList(self.g, dtype, regions, what)
        return Tensor(self.g, dtype, self._layout([t["offset"], t["shape"], t["strides"]],
                                                  dtype, size, what), what)

    @staticmethod
    def _layout(r, dtype, size: int, what: str) -> tuple:
        offset, shape, strides = _list(r, what)
        shape = _shape(shape, what)
        strides = tuple(_int(s, f"{what}: a stride", -MAX_ELEMENTS, MAX_ELEMENTS)
                        for s in _list(strides, what))
        _need(len(strides) == len(shape), f"{what}: {len(shape)} dimensions but "
              f"{len(strides)} strides")
        offset = _int(offset, f"{what}: offset")
        lo = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
        hi = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
        _need(0 in shape or (lo >= 0 and hi < size), f"{what}: region (offset {offset}, "
              f"shape {list(shape)}, strides {list(strides)}) reaches outside the graph's "
              f"{size:,} {dtype} elements")
        return offset, shape, strides

    def program(self, p):
        self.nodes += 1
        _need(self.nodes <= MAX_ITEMS, f"more than {MAX_ITEMS:,} program nodes")
        p = _dict(p, "a program")
        _need(len(p) == 1, f"a program is one {{kind: ...}}, got keys {list(p)[:5]}")
        (kind, a), = p.items()
        if kind == "Sequence":
            return P.Sequence([self.program(q) for q in _list(a, "Sequence")])
        if kind == "Execute":
            return P.Execute(self.g.compute_sets[_int(a, "Execute: compute set", 0,
                                                      len(self.g.compute_sets))])
        if kind == "Copy":
            src, dst, offset = _list(a, "Copy")
            if isinstance(offset, dict):
                offset = self.tensor(offset.get("tensor"), "Copy: offset")
            return P.Copy(self._end(src), self._end(dst), offset)
        if kind == "Repeat":
            count, body = _list(a, "Repeat")
            return P.Repeat(_int(count, "Repeat: count"), self.program(body))
        if kind == "RepeatWhileTrue":
            cond, predicate, body = _list(a, "RepeatWhileTrue")
            return P.RepeatWhileTrue(self.program(cond), self.tensor(predicate, "predicate"),
                                     self.program(body))
        if kind == "If":
            predicate, then, else_ = _list(a, "If")
            return P.If(self.tensor(predicate, "If: predicate"), self.program(then),
                        self.program(else_))
        if kind == "PrintTensor":
            title, t, fmt = _list(a, "PrintTensor")
            return P.PrintTensor(str(title), self.tensor(t, "PrintTensor"),
                                 PrintTensorFmt(**_dict(fmt, "PrintTensor: fmt")))
        raise GraphDataError(f"unknown program kind {str(kind)[:80]!r}: use Sequence, "
                             "Execute, Copy, Repeat, RepeatWhileTrue, If or PrintTensor")

    def _end(self, x):
        x = _dict(x, "a side of a Copy")
        _need(len(x) == 1, "a side of a Copy is one of tensor, stream, remote_buffer")
        (kind, a), = x.items()
        if kind == "tensor":
            return self.tensor(a, "Copy")
        found = {"stream": self.g.streams, "remote_buffer": self.g.remote_buffers}.get(kind)
        _need(found is not None and a in found,
              f"Copy: no {kind} named {str(a)[:80]!r} in the graph")
        return found[a]

