"""Small helpers shared by the lesson checks (public: no lesson imports another's
private helpers)."""

from __future__ import annotations

import contextlib
import functools
import io

import numpy as np

import ipukit as ipu
from ipukit import backend, graph_data
from ipukit.parallel import sharded

from .feedback import Wrong, _not_implemented, as_int, clipped, library_error, plural


def device(tiles: int, num_ipus: int = 1):
    """A fresh Mk2 IPUModel device with ``tiles`` tiles per IPU."""
    return ipu.IPUModel("ipu2", num_ipus=num_ipus, tiles_per_ipu=tiles).create_device()


#: Answers to these checks are cycle or byte counts.
as_count = functools.partial(as_int, kind="whole number of cycles or bytes")


def no_compile(what: str, exc: Exception) -> str:
    """Feedback for a learner's graph that does not compile (what is wrong, not the fix)."""
    return library_error(f"{what} does not compile", exc)


class SumVertex(ipu.Vertex):
    """out = the sum of x (one value per vertex)."""

    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.out[...] = self.x.sum(axis=-1, keepdims=True)


class AddVertex(ipu.Vertex):
    """out = x + y."""

    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    y = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.out[...] = self.x + self.y


def teaching_target(num_ipus: int, tiles: int = 4):
    """``num_ipus`` Mk2 IPUs of ``tiles`` tiles each (4 tiles: 2.4 MiB per IPU)."""
    return device(tiles, num_ipus).target


def engine(g, prog, what: str, per_vertex: bool = False):
    """The learner's graph compiled into an Engine, or a wrong answer saying why not."""
    try:
        return ipu.Engine(g, prog, per_vertex=per_vertex)
    except ipu.IpuError as exc:
        raise Wrong(no_compile(what, exc)) from None


def device_cycles(eng) -> int:
    """Cycles of every compiled step but the host synchronisation."""
    return sum(s.cycles for s in eng.executable.steps if s.kind != "host")


class BusyVertex(ipu.Vertex):
    """A vertex that only costs cycles: the default estimate (10 + its elements)
    (kit convention) or one set with ``set_perf_estimate``."""

    x = ipu.Input(ipu.Vector(ipu.FLOAT))

    def compute(self):
        pass


def optimisers() -> dict:
    """name -> (a fresh optimiser, its slots: copies of the weights it keeps as state)."""
    from ipukit.parallel import optim

    return {"SGD": (lambda: optim.SGD(0.1), 0), "Momentum": (lambda: optim.Momentum(0.1), 1),
            "AdamW": (lambda: optim.AdamW(), 2)}


def program(value, what: str):
    """``value`` if it is a program, else a wrong answer saying what ``what`` returned."""
    if not isinstance(value, ipu.Program):
        raise Wrong(f"{what} must return a program (e.g. ipu.Sequence), got {value!r}")
    return value


def element_tiles(g, t) -> np.ndarray:
    """The tile of each element of ``t`` in flattened order (-1: mapped to no tile):
    ``Graph.get_tile_mapping`` as plain data, for a judged check's trial."""
    owner = np.full(t.num_elements(), -1, np.int64)
    for tile, runs in enumerate(g.get_tile_mapping(t, throw_on_incomplete=False)):
        for begin, end in runs:
            owner[begin:end] = tile
    return owner


def elements_of(view, tensor) -> np.ndarray:
    """For each element of ``view`` (flattened), its flat index in ``tensor``, or -1 where
    it is not an element of ``tensor``: which data a learner's vertex or view reads, as
    plain data."""
    view_idx = np.asarray(view.idx).reshape(-1)
    base = np.asarray(tensor.idx).reshape(-1)
    if view.dtype != tensor.dtype or base.size == 0:
        return np.full(view_idx.size, -1, np.int64)
    order = np.argsort(base, kind="stable")
    found = order[np.searchsorted(base, view_idx, sorter=order).clip(0, base.size - 1)]
    return np.where(base[found] == view_idx, found, -1).astype(np.int64)


# -- graphs sent as plain data (ipukit.graph_data): the kernel describes, the judge runs -----

#: Most supersteps the judge emulates of a learner's program (kit convention: the
#: references take a few dozen; a program sent as data could ask for a Repeat of billions).
MAX_STEPS = 1_000


def sent_graph(g, prog, what: str, stand_ins=None) -> dict:
    """The learner's graph and program as plain data (the learner's kernel): the judge
    rebuilds and runs it itself (:func:`rebuilt_engine`). ``stand_ins``: the learner's
    codelets -> the kit codelets the judge runs in their place."""
    if not isinstance(prog, ipu.Program):
        raise Wrong(f"{what}: return a program, got {prog!r}"[:300])
    try:
        return graph_data.to_plain(g, [prog], stand_ins)
    except graph_data.GraphDataError as exc:
        raise Wrong(f"{what}: {exc}") from None


def rebuilt(sent, base, what: str, kept=(), reads=(), programs: int = 1):
    """The graph and programs the kernel described, rebuilt here (the judge) with the kit's
    own code on a fresh target like ``base``'s (its IPUs and tiles per IPU). ``base``: the
    judge's own graph of the case before the learner's code ran; each ``(name, kind)`` in
    ``kept`` (kind ``"host_writes"``, ``"host_reads"``) must be the same tensor there, with
    base's shape, type and tile mapping (a graph that moved it answers another exercise),
    or kind ``"remote_buffers"``: base's type, size and repeats; each name in ``reads``
    must be a host read of the rebuilt graph; ``programs``: how many programs it must have
    (an Engine runs them by index). Returns (graph, programs)."""
    target = device(base.target.tiles_per_ipu, base.target.num_ipus).target
    try:
        g, progs = graph_data.from_plain(sent, target)
    except ipu.IpuError as exc:
        raise Wrong(library_error(f"{what}: your graph cannot be rebuilt", exc)) from None
    if len(progs) != programs:
        raise Wrong(f"{what}: expected {plural(programs, 'program')}, got {len(progs)}")
    for name, handles in kept:
        mine, want = getattr(g, handles).get(name), getattr(base, handles)[name]
        if handles == "remote_buffers":
            if mine is None or (mine.dtype, mine.num_elements, mine.repeats) != (
                    want.dtype, want.num_elements, want.repeats):
                raise Wrong(f"{what}: your graph does not keep the exercise's remote buffer "
                            f"{name!r} (its type, size and repeats)")
        elif (mine is None or mine.shape != want.shape or mine.dtype != want.dtype
                or g.get_tile_mapping(mine, False) != base.get_tile_mapping(want)):
            raise Wrong(f"{what}: your graph does not keep the exercise's tensor {name} "
                        "(its shape, type and tile mapping)")
    for name in reads:
        if name not in g.host_reads:
            raise Wrong(f"{what}: your graph has no host read {name!r}: return the tensor")
    return g, progs


def rebuilt_engine(sent, base, what: str, kept=(), reads=(), check=None, programs: int = 1,
                   max_steps: int = MAX_STEPS):
    """The graph the kernel described (:func:`rebuilt`), compiled (at most ``max_steps``
    emulated steps a run) and loaded on a fresh device; a PrintTensor in it writes to a
    private buffer, never the grader's stderr. ``check(graph)``, if given, looks at the
    rebuilt graph before it is compiled (raising Wrong)."""
    g, progs = rebuilt(sent, base, what, kept, reads, programs)
    if check is not None:
        check(g)
    return loaded_engine(g, progs if programs > 1 else progs[0], what, max_steps)


def loaded_engine(g, progs, what: str, max_steps: int = MAX_STEPS):
    """A rebuilt graph ``g`` and its program(s) compiled and loaded in the judge."""
    try:
        eng = ipu.Engine(g, progs, {"debug.maxEmulatedSteps": max_steps})
    except ipu.IpuError as exc:
        raise Wrong(no_compile(f"{what}: your graph", exc)) from None
    eng.set_print_tensor_stream(io.StringIO())
    with judged_run(what):
        eng.load(device(g.target.tiles_per_ipu, g.target.num_ipus))
    return eng


@contextlib.contextmanager
def judged_run(what: str):
    """Run a rebuilt graph in the judge: a kit error is Wrong, naming the case."""
    try:
        with np.errstate(all="ignore"):
            yield
    except ipu.IpuError as exc:
        raise Wrong(library_error(f"{what}: your graph fails when run", exc)) from None


def learner_codelets(g) -> list:
    """The codelets of ``g`` that are not the kit's (the learner's), in order of use."""
    from ipukit.poplibs import popops

    return [c for c in dict.fromkeys(g.v_cls)
            if graph_data.codelet_name(c) is None and popops.codelet_recipe(c) is None]


def only_codelet(codelet, what: str, yours: str):
    """A ``check`` for :func:`rebuilt_engine`: Wrong unless the rebuilt graph has vertices
    and every one runs ``codelet`` (the kit's copy of the exercise's codelet, the learner's
    own sent under its name): an exercise that asks for a graph of that codelet cannot be
    had from popops' ops or another kit codelet. ``yours``: that codelet, in words."""
    def check(g):
        others = [c for c in dict.fromkeys(g.v_cls) if c is not codelet]
        if others:
            raise Wrong(f"{what}: your graph computes with {clipped(others[0].__name__, 80)} "
                        f"vertices; build it from {yours} alone")
        if not g.v_cls:
            raise Wrong(f"{what}: your graph has no vertex: build it from {yours}")

    return check


def same_fields(cls, reference) -> bool:
    """Whether codelet ``cls`` has ``reference``'s fields (names, kinds and types)."""
    def shape(c):
        return {n: (f.kind, f.vector, f.dtype) for n, f in c.fields.items()}

    return isinstance(cls, type) and issubclass(cls, ipu.Vertex) and shape(cls) == shape(
        reference)


def stand_ins(g, reference, what: str, fields: str) -> dict:
    """The learner's codelets of ``g``, each -> ``reference`` (the kit codelet with the
    exercise's fields that the judge runs in its place), or Wrong naming one whose fields
    differ (``fields``: the exercise's, in words)."""
    found = learner_codelets(g)
    for cls in found:
        if not same_fields(cls, reference):
            raise Wrong(f"{what}: codelet '{cls.__name__}' has fields {dict(cls.fields)}; "
                        f"the exercise's has {fields}"[:600])
    return {cls: reference for cls in found}


def codelet_run(cls, inputs: dict, outputs: dict) -> dict:
    """What codelet ``cls`` computes as one vertex on tile 0 (the learner's kernel):
    ``inputs`` field -> values, ``outputs`` field -> shape; the outputs' values."""
    return codelet_runs(cls, [inputs], outputs)[0]


def codelet_runs(cls, pieces: list, outputs: dict) -> list:
    """What codelet ``cls`` computes on each of ``pieces`` (field -> values), one vertex
    per piece on tile 0, all in one compute set (the learner's kernel): per piece, each
    field of ``outputs`` (field -> shape) -> its values. Each field has the type the codelet
    declares (FLOAT if it declares none); a field in both (an InOut) starts at its input."""
    dev = device(1)
    g = ipu.Graph(dev.target)
    cs = g.add_compute_set("codelet")
    declared = getattr(cls, "fields", {})
    for k, inputs in enumerate(pieces):
        fields = {}
        for name in {**inputs, **outputs}:
            dtype = getattr(declared.get(name), "dtype", None) or ipu.FLOAT
            shape = np.shape(inputs[name]) if name in inputs else outputs[name]
            fields[name] = g.add_variable(dtype, list(shape), f"{name}{k}")
            g.set_tile_mapping(fields[name], 0)
            g.create_host_write(f"{name}{k}", fields[name])
            g.create_host_read(f"{name}{k}", fields[name])
        g.add_vertex(cs, cls, fields, tile=0)
    eng = ipu.Engine(g, ipu.Execute(cs))
    eng.load(dev)
    for k, inputs in enumerate(pieces):
        for name, value in inputs.items():
            eng.write_tensor(f"{name}{k}", value)
    eng.run()
    return [{name: eng.read_tensor(f"{name}{k}") for name in outputs}
            for k in range(len(pieces))]


# -- judged checks: reading what a trial returned (the judge's side) -------------------------

def output_array(value, shape, what: str) -> np.ndarray:
    """A trial's output as a float64 array of ``shape`` (None: any shape), or Wrong saying
    what came back (the judge never trusts what the kernel sent: a malformed value only
    fails)."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise Wrong(f"{what}: expected numbers, got {value!r}"[:300]) from None
    if shape is not None and array.shape != tuple(shape):
        raise Wrong(f"{what}: expected shape {tuple(shape)}, got {array.shape}")
    return array


def output_field(output, key: str, what: str):
    """``output[key]`` of a trial's dict output, or Wrong."""
    if not isinstance(output, dict) or key not in output:
        raise Wrong(f"{what}: the trial gave no {key!r}")
    return output[key]


@contextlib.contextmanager
def naming(what: str):
    """Run learner code in a trial so that an error names the case: ``what: your code
    raised ...`` (a ``raise NotImplementedError`` stub still counts as not solved)."""
    try:
        yield
    except Wrong:
        raise
    except Exception as exc:  # the learner's code raised
        if _not_implemented(exc) is not None:
            raise
        raise Wrong(f"{what}: your code raised {type(exc).__name__}: {exc}") from None


def capped_warmups(num_stages: int, g: int, max_in_flight) -> list[int]:
    """The warm-up forwards of each stage of 1F1B under per-stage limits (exercises 08.3
    and 13.2): 1F1B's N - k, but never more than the stage's limit, nor than the stage
    before it warms up (else the two wait for each other), nor than the g micro-batches.

    >>> capped_warmups(4, 8, [2, 4, 4, 4])
    [2, 2, 2, 1]
    """
    warm, cap = [], g
    for k in range(num_stages):
        cap = min(cap, int(max_in_flight[k]))
        warm.append(min(num_stages - k, cap))
    return warm


def gantt(bars, rows, end: float, marks=(), width: int = 72):
    """A Gantt chart on a fixed time axis, every row drawn (empty ones too).

    ``bars``: ``(row, start, end, label)``; ``rows``: the row names, top to bottom;
    ``end``: the right end of the axis (give two charts the same ``end`` to compare them);
    a bar whose label starts with F is blue, with W (a weight gradient) green, else orange;
    ``marks``: ``(row, time, label)`` drawn as a red stop sign, e.g. where an IPU waits
    for ever. Text: each bar as ``[label]`` cut to its width, ``X`` at a mark.

    >>> print(gantt([("IPU0", 0, 2, "F0")], ["IPU0", "IPU1"], 4, [("IPU1", 0, "waits")],
    ...             width=8).text)
           IPU0 |[F0]    |
           IPU1 |X       |
                 0       4
    """
    import html as _html

    from .feedback import Picture

    end = max(float(end), 1e-9)
    scale = 400 / end
    html_rows, text_rows = [], []
    for row in rows:
        line = [" "] * width
        divs = []
        for r, s, e, label in bars:
            if r != row:
                continue
            colour = {"F": "#4e79a7", "W": "#59a14f"}.get(label[:1], "#f28e2b")
            divs.append(f"<div title='{_html.escape(label)}: {s:g}-{e:g}' style='position:"
                        f"absolute;left:{s * scale:.1f}px;width:"
                        f"{max(1.0, (e - s) * scale - 1):.1f}px;height:16px;background:"
                        f"{colour};color:#fff;font-size:10px;overflow:hidden'>"
                        f"{_html.escape(label)}</div>")
            a = min(width - 1, int(s / end * width))
            b = max(a + 1, min(width, int(e / end * width)))
            cell = ("[" + label + "]")[:b - a] if b - a > 2 else label[:b - a]
            line[a:a + len(cell)] = cell
        for r, t, label in marks:
            if r == row:
                divs.append(f"<div title='{_html.escape(label)}' style='position:absolute;"
                            f"left:{t * scale:.1f}px;width:14px;height:16px;background:#cf222e;"
                            "color:#fff;font-size:10px;text-align:center'>&#x2716;</div>")
                line[min(width - 1, int(t / end * width))] = "X"
        html_rows.append(f"<tr><td style='font-size:11px;padding-right:6px'>"
                         f"{_html.escape(row)}</td><td><div style='position:relative;"
                         f"width:420px;height:18px;background:#f6f8fa'>{''.join(divs)}</div>"
                         "</td></tr>")
        text_rows.append(f"   {row:>8} |{''.join(line)}|")
    axis = f"   {'':>8}  0{f'{end:g}':>{width}}"
    html_rows.append("<tr><td></td><td><div style='position:relative;width:420px;"
                     "height:12px;font-size:9px;color:#57606a'><span style='position:"
                     "absolute;left:0'>0</span><span style='position:absolute;right:0'>"
                     f"{end:g}</span></div></td></tr>")
    return Picture(f"<table style='border:none'>{''.join(html_rows)}</table>",
                   "\n".join(text_rows) + "\n" + axis)


class PeerLog(sharded.CollectiveLog):
    """The ``log`` a sharded exercise's trial gives the learner's function (in the kernel),
    which holds the data of one shard only, ``shard``: the judge plays the other shards.
    ``peers`` lists, in order, the all-reduces they run, ``{"op", "what", "value"}``:
    ``value`` is their contributions already combined (the other shards' max, or their
    sum), worked out in the judge from data the kernel never sees. Each all-reduce combines
    ``parts[shard]`` with it and gives every shard the result; ``calls`` keeps, as plain
    data for the judge, what each carried from ``shard`` (``sent``). ``what``: the case,
    named in the messages.

    >>> import numpy as np
    >>> log = PeerLog(3, 1, [{"op": "max", "what": "each row's max", "value": [5.0, 0.0]}])
    >>> log.all_reduce([None, np.array([1.0, 2.0]), None], "max", "row max")[2]
    array([5., 2.])
    >>> log.calls
    [{'kind': 'all_reduce_max', 'label': 'row max', 'sent': array([1., 2.])}]
    """

    def __init__(self, num_shards: int, shard: int, peers: list, what: str = ""):
        super().__init__(num_shards)
        self.shard, self.peers, self.what = int(shard), list(peers), what
        self.calls: list[dict] = []

    def _plan(self) -> str:
        return ", then ".join(f"{p['op'].upper()} of {p['what']}" for p in self.peers)

    def all_reduce(self, parts: list, op: str, label: str) -> list:
        what = f"{self.what}: " if self.what else ""
        what += f"all-reduce {len(self.calls) + 1} ('{str(label)[:80]}')"
        if not isinstance(parts, (list, tuple)) or len(parts) != self.num_shards:
            raise Wrong(f"{what}: pass a list of {self.num_shards} arrays, one per shard")
        if len(self.calls) == len(self.peers):
            raise Wrong(f"{what}: the other shards (the check plays them) run "
                        f"{plural(len(self.peers), 'all-reduce')}, {self._plan()}, "
                        "and no more")
        peer = self.peers[len(self.calls)]
        if op != peer["op"]:
            raise Wrong(f"{what} is {op!r}; the other shards (the check plays them) "
                        f"all-reduce {peer['op'].upper()} of {peer['what']} here: "
                        f"{self._plan()}")
        own = np.asarray(backend.to_numpy(parts[self.shard]), dtype=np.float64)
        value = np.asarray(peer["value"], dtype=np.float64)
        if own.size != value.size:
            raise Wrong(f"{what} carries {own.size:,} numbers per shard (shape "
                        f"{list(own.shape)}); the other shards all-reduce {peer['what']}, "
                        f"shape {list(value.shape)}: combine that, never the whole tensor")
        super().all_reduce([own] * self.num_shards, op, label)  # its bytes and cycles
        value = value.reshape(own.shape)
        total = np.maximum(own, value) if op == "max" else own + value
        self.calls.append({"kind": f"all_reduce_{op}", "label": str(label)[:80],
                           "sent": own.copy()})
        return [total.copy() for _ in range(self.num_shards)]

    def broadcast(self, x, label: str, root: int = 0) -> list:
        raise Wrong(f"{self.what}: broadcast '{str(label)[:80]}': this exercise combines "
                    "the shards with log.all_reduce only")

    def reduce_add(self, parts: list, label: str, root: int = 0):
        raise Wrong(f"{self.what}: reduce_add '{str(label)[:80]}': this exercise combines "
                    "the shards with log.all_reduce only")


def nan_parts(parts: list, shard: int) -> list:
    """``parts`` as the kernel gets them: shard ``shard``'s own array, and nan of the same
    shape for every other shard (their data stays with the judge, which plays them)."""
    return [p if s == shard else np.full_like(p, np.nan, dtype=np.float64)
            for s, p in enumerate(parts)]


def check_sent(calls, plan: list, shard: int, what: str) -> None:
    """Wrong unless shard ``shard``'s all-reduces (:class:`PeerLog`'s ``calls``) carried,
    in order, what ``plan`` says, ``(op, what it is, the expected array)``: the other
    shards, played by the judge, sent theirs by the same rule."""
    if not calls:
        raise Wrong(f"{what}: no collective ran. Shard {shard} sees only its own part (the "
                    "check plays the other shards and keeps their data: nan in your "
                    "kernel): combine the shards with log.all_reduce")
    kinds, want = [c["kind"] for c in calls], [f"all_reduce_{op}" for op, _, _ in plan]
    if kinds != want:
        raise Wrong(f"{what}: your collectives were {kinds}; the other shards run {want}")
    for call, (op, desc, expected) in zip(calls, plan):
        sent = np.asarray(call["sent"], dtype=np.float64).reshape(np.shape(expected))
        bad = np.argwhere(~np.isclose(sent, expected, rtol=1e-7, atol=1e-9))
        if len(bad):
            at = tuple(int(i) for i in bad[0])
            got = sent[at]
            tip = (". It read another shard's part, which the check keeps (nan in your "
                   f"kernel): shard {shard} may only use its own" if np.isnan(got) else
                   ". exp() of a large logit overflows: subtract the row maximum (all "
                   "shards' maximum) first" if np.isinf(got) else "")
            raise Wrong(f"{what}: your all-reduce {op.upper()} '{clipped(call['label'], 80)}'"
                        f" sent {got:.7g} from shard {shard} at {list(at)}; each shard sends "
                        f"{desc}, here {expected[at]:.7g}{tip}")
