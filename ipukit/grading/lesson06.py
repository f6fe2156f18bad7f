"""The ``check_*`` functions of lesson 06: the host and the IPU.

Every check is judged (:func:`ipukit.grading.feedback.exercise`): the judge draws the
cases and works out the expected answers with the kit's own code (a stream copy's cycles
from the compiled ``Step``, a loop's host-sync share from the ``Trace`` of real runs,
batch means, running maxima, SGD and Collatz counts from NumPy and Python); the learner's
kernel only runs the learner's functions and returns what came out. For the loops and
programs of 06.3-06.6 what comes out is the learner's graph and programs as plain data
(:mod:`ipukit.graph_data`): the judge rebuilds and runs them with its own images, (x, y)
and start values, which never reach the kernel.

>>> from ipukit.grading import lesson06
>>> r = lesson06.check_running_max(lambda *args: None, show=False)
>>> print(r.text().splitlines()[0])
WRONG · Exercise 06.4 · a running maximum that outlives the call: 0/3 points
"""

from __future__ import annotations

import math

import numpy as np

import ipukit as ipu
from ipukit import graph_data
from ipukit.host import InfeedQueue, OutfeedMode, OutfeedQueue
from ipukit.tensor import TYPE_NAMES

from .common import BusyVertex as _Busy
from .common import (
    as_count,
    codelet_runs,
    device,
    judged_run,
    learner_codelets,
    loaded_engine,
    naming,
    output_array,
    output_field,
    rebuilt,
    rebuilt_engine,
    same_fields,
    sent_graph,
    stand_ins,
)
from .feedback import Wrong, as_int, clipped, exercise, first_mismatch, plural


def _target(version: str, tiles: int):
    return ipu.IPUModel(version, tiles_per_ipu=tiles).create_device().target


# -- 06.1 ---------------------------------------------------------------------------------


def _stream_step(version: str, tiles: int, per_tile, to_device: bool):
    """Compile one stream copy of a float tensor mapped ``per_tile[t]`` floats on tile t."""
    dev = ipu.IPUModel(version, tiles_per_ipu=tiles).create_device()
    g = ipu.Graph(dev.target)
    per_tile = np.asarray(per_tile)
    n = int(per_tile.sum())
    x = g.add_variable(ipu.FLOAT, [n], "x")
    begin = 0
    for tile, count in enumerate(per_tile):
        if count:
            g.set_tile_mapping(x[begin:begin + int(count)], tile)
            begin += int(count)
    if to_device:
        prog = ipu.Copy(g.add_host_to_device_fifo("in", ipu.FLOAT, n), x)
    else:
        prog = ipu.Copy(x, g.add_device_to_host_fifo("out", ipu.FLOAT, n))
    step = ipu.compile_graph(g, [prog]).steps[1]
    return dev.target, step


def _stream_cases(rng) -> list[dict]:
    """One tile's 4 B/cycle limits; the host link limits; one float; uneven tiles both
    ways on every preset; then a random copy. The judge compiles each stream copy."""
    found = [("ipu2", 4, [256, 0, 0, 0], True),  # one tile's 4 B/cycle limits
             ("ipu2", 64, [16] * 64, True),  # 4 KiB over 64 tiles: the host link limits
             ("ipu2", 1, [1], False),  # one float
             ("bow", 16, rng.integers(0, 200, 16), False),
             ("ipu1", 32, rng.integers(0, 40, 32), True),
             ("ipu2", 8, rng.integers(1, 3000, 8), False)]
    tiles = int(rng.integers(2, 65))
    found.append((str(rng.choice(["ipu1", "ipu2", "bow"])), tiles,
                  rng.integers(0, 400, tiles), bool(rng.integers(2))))
    cases = []
    for version, tiles, floats, to_device in found:
        target, step = _stream_step(version, tiles, floats, to_device)
        cases.append({"version": version, "tiles": tiles, "to_device": to_device,
                      "tile_bytes": (step.tile_bytes_in if to_device
                                     else step.tile_bytes_out).copy(),
                      "_cycles": int(step.cycles), "_sync": int(step.sync_cycles),
                      "_exchange": int(step.exchange_cycles)})
    return cases


def _stream_what(case) -> str:
    tile_bytes = case["tile_bytes"]
    return (f"a StreamCopy {'host -> IPU' if case['to_device'] else 'IPU -> host'} of "
            f"{int(tile_bytes.sum()):,} B on {case['tiles']} tiles of '{case['version']}' (at "
            f"most {int(tile_bytes.max()):,} B on one tile)")


def _stream_trial(case, stream_copy_cycles):
    target, what = _target(case["version"], case["tiles"]), _stream_what(case)
    with naming(what):
        got = stream_copy_cycles(target, case["tile_bytes"].copy())
    return as_count(got, what)


@exercise("06.1", "the cost of a stream copy", points=2, hints=(
    "Two things carry the bytes one after the other: the host link and the tiles. Which "
    "one limits the step?",
    "A stream copy is one superstep: a sync, then an exchange as long as the slower of "
    "the busiest tile (its own bytes, 4 per cycle) and the host link, which carries ALL "
    "the bytes at target.host_link_bytes_per_cycle.",
    "target.sync_cycles + max(ceil(max bytes of one tile / exchange_bytes_per_cycle), "
    "ceil(total bytes / host_link_bytes_per_cycle))."),
    answers=("stream_copy_cycles",), cases=_stream_cases, trial=_stream_trial)
def check_stream_copy_cycles(cases, outputs):
    """Exercise 06.1: ``stream_copy_cycles(target, tile_bytes)`` → cycles of a StreamCopy."""
    for case, got in zip(cases, outputs):
        what = _stream_what(case)
        got = as_count(got, what)
        if got != case["_cycles"]:
            target = _target(case["version"], case["tiles"])
            raise Wrong(f"{what}: the Trace's step takes {case['_cycles']} cycles "
                        f"(sync {case['_sync']} + exchange {case['_exchange']}), you said "
                        f"{got}" + _stream_diagnosis(target, case["tile_bytes"], got))


def _stream_diagnosis(target, tile_bytes, got: int) -> str:
    sync = target.sync_cycles
    tile = -(-int(tile_bytes.max()) // target.exchange_bytes_per_cycle)
    link = math.ceil(int(tile_bytes.sum()) / target.host_link_bytes_per_cycle)
    if got == sync + tile:
        return (f". That is the busiest tile's time alone; every byte also crosses the one "
                f"host link ({target.host_link_bytes_per_cycle:.2f} B/cycle): {link} cycles")
    if got == sync + link:
        return f". That is the host link alone; the busiest tile needs {tile} cycles"
    if got in (tile, link, max(tile, link)):
        return f". Did you forget the sync ({sync} cycles) before the exchange?"
    return ""


# -- 06.2 ---------------------------------------------------------------------------------


def _loop(version: str, k: int):
    """A training-like step: stream k floats in, one compute set. (device, graph, step)"""
    dev = ipu.IPUModel(version, tiles_per_ipu=4).create_device()
    g = ipu.Graph(dev.target)
    x = g.add_variable(ipu.FLOAT, [k], "x")
    g.set_tile_mapping(x, 0)
    cs = g.add_compute_set("step")
    g.add_vertex(cs, _Busy, {"x": x}, tile=0)
    step = ipu.Sequence(ipu.Copy(g.add_host_to_device_fifo("in", ipu.FLOAT, k), x),
                        ipu.Execute(cs))
    return dev, g, step


def _device_share(version: str, k: int, n: int) -> tuple[float, int, int]:
    """Run Repeat(n, step) once; (share of the Trace's cycles not in the host sync, B, H)."""
    dev, g, step = _loop(version, k)
    eng = ipu.Engine(g, ipu.Repeat(n, step))
    eng.load(dev)
    eng.connect_stream("in", np.zeros(k, np.float32))
    eng.run()
    s = eng.trace.summary()
    busy = s["total_cycles"] - s["host_sync_cycles"]
    return busy / s["total_cycles"], busy // n, s["host_sync_cycles"]


def _smallest_steps(version: str, k: int, efficiency: float) -> tuple[int, int]:
    """(B, the smallest N with device share >= efficiency), measured in the Trace.

    N comes from the measured H and B (N*B / (H + N*B) >= efficiency) and is confirmed by
    running N and N - 1 steps, so a learner's huge N is never run.
    """
    _, B, H = _device_share(version, k, 1)
    n = max(1, math.ceil(efficiency * H / ((1 - efficiency) * B)))
    while _device_share(version, k, n)[0] < efficiency:  # float rounding at the edge
        n += 1
    while n > 1 and _device_share(version, k, n - 1)[0] >= efficiency:
        n -= 1
    return B, n


def _steps_cases(rng) -> list[dict]:
    """Presets, small and large steps, efficiencies up to 0.99 and 0 (one step is always
    enough); then a random one. The judge measures B and the smallest N in Traces."""
    found = [("ipu2", 64, 0.5), ("ipu2", 256, 0.9), ("bow", 1000, 0.75), ("ipu1", 16, 0.99),
             ("ipu2", 20_000, 0.2), ("ipu2", 64, 0.0),
             (str(rng.choice(["ipu1", "ipu2", "bow"])), int(rng.integers(16, 5000)),
              round(float(rng.uniform(0.05, 0.97)), 2))]
    cases = []
    for version, k, efficiency in found:
        B, expected = _smallest_steps(version, k, efficiency)
        cases.append({"version": version, "step_cycles": B, "efficiency": efficiency,
                      "_k": k, "_expected": expected})
    return cases


def _steps_what(case) -> str:
    target = _target(case["version"], 4)
    return (f"'{case['version']}' (host sync {target.host_sync_cycles:,} cycles), a step of "
            f"B = {case['step_cycles']:,} cycles, efficiency {case['efficiency']}")


def _steps_trial(case, steps_per_call):
    target, what = _target(case["version"], 4), _steps_what(case)
    with naming(what):
        got = steps_per_call(target, case["step_cycles"], case["efficiency"])
    return as_int(got, what)


@exercise("06.2", "how many steps per host call", points=2, hints=(
    "Write down how long one call of N steps takes, and how much of it the device works.",
    "One Engine.run of N steps takes H + N*B cycles (H = target.host_sync_cycles), of "
    "which N*B are on the device; the share grows with N, so look for the first N that "
    "reaches the efficiency. N is at least 1.",
    "Solve N*B / (H + N*B) >= e for N: N >= e*H / ((1 - e)*B); round up, and at least 1."),
    answers=("steps_per_call",), cases=_steps_cases, trial=_steps_trial)
def check_steps_per_call(cases, outputs):
    """Exercise 06.2: ``steps_per_call(target, step_cycles, efficiency)`` → smallest N."""
    for case, n in zip(cases, outputs):
        what, expected = _steps_what(case), case["_expected"]
        efficiency, k = case["efficiency"], case["_k"]
        n = as_int(n, what)
        if n < 1:
            raise Wrong(f"{what}: expected at least 1 step per Engine.run, got {n}")
        if n < expected:
            share = _device_share(case["version"], k, n)[0]
            raise Wrong(f"{what}: with N = {n} steps per Engine.run the device works "
                        f"{share:.2%} of the time (measured in the Trace), below "
                        f"{efficiency:.0%}; N is too small")
        if n > expected:
            share = _device_share(case["version"], k, expected)[0]
            raise Wrong(f"{what}: N = {expected} already keeps the device working "
                        f"{share:.2%} of the time (>= {efficiency:.0%}); you said "
                        f"{n:,}, expected the smallest such N")


# -- 06.3 to 06.5: loops on the device, fed and read by queues --------------------------------
# The kernel builds the learner's loop with queues of placeholder data (zeros: only the
# batch's shape and type reach the graph) and sends the graph and its program as plain data
# (ipukit.graph_data); the judge rebuilds them, feeds the infeed's FIFOs its own batches
# and reads what the outfeed's FIFO receives, run by run.


class _BatchMean(ipu.Vertex):
    """out = the mean of x: the notebook's codelet as the judge runs it in place of the
    learner's (whose compute is checked on its own, in the kernel)."""

    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = self.x.mean(axis=-1)


class _PixelMax(ipu.Vertex):
    """best = the larger of best and the largest of images, element by element: 06.4's
    codelet as the judge runs it in place of the learner's."""

    images = ipu.Input(ipu.Vector(ipu.FLOAT))
    best = ipu.InOut(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.best[...] = np.maximum(self.best, self.images.max(axis=-1, keepdims=True))


def _on_device_loop(prog, iterations: int, what: str) -> None:
    """Wrong unless ``prog`` is ``loops.repeat``'s ``ipu.Repeat(iterations, ...)``."""
    if not isinstance(prog, ipu.Repeat) or prog.count != iterations:
        shown = (f"ipu.Repeat({prog.count}, ...)" if isinstance(prog, ipu.Repeat)
                 else clipped(repr(prog), 200))
        raise Wrong(f"{what}: expected the on-device loop ipu.Repeat({iterations}, ...) "
                    f"that loops.repeat returns, got {shown}")


def _queues(placeholder, batch: int):
    """A fresh 4-tile graph, an infeed of one batch of ``placeholder`` data (its shape and
    type are the case's; the judge feeds its own values) and an outfeed (the kernel's)."""
    return (ipu.Graph(device(4).target), InfeedQueue(placeholder, batch_size=batch),
            OutfeedQueue(OutfeedMode.ALL))


def _loop_sent(case, build, placeholder, what: str, reference, fields: str,
               outputs: dict) -> dict:
    """The learner's ``build(graph, infeed, outfeed, iterations)`` as plain data, its
    codelets sent as the kit's ``reference`` (``fields``: the exercise's, in words), and
    what each of them computes on the case's ``pieces`` (``outputs``: field -> shape)
    (the kernel's side)."""
    g, infeed, outfeed = _queues(placeholder, case["batch"])
    with naming(what):
        prog = build(g, infeed, outfeed, case["iterations"])
    _on_device_loop(prog, case["iterations"], what)
    mine = stand_ins(g, reference, what, fields)
    return {"graph": sent_graph(g, prog, what, mine),
            "codelets": {cls.__name__: codelet_runs(cls, case["pieces"], outputs)
                         for cls in mine}}


def _fifos(g, to_device: bool) -> dict:
    """name -> (element type, elements) of ``g``'s FIFOs one way."""
    return {s.name: (TYPE_NAMES.get(s.dtype, str(s.dtype)), int(s.n))
            for s in g.streams.values() if bool(s.to_device) == to_device}


def _feeds(g, prog, infeed: dict, outfeed: int, iterations: int, what: str) -> None:
    """The judge's check of a rebuilt loop: its host-to-device FIFOs are the infeed's
    (``infeed``: name -> elements of float), it has one device-to-host FIFO of ``outfeed``
    floats, and its program is ``Repeat(iterations, ...)``."""
    mine = _fifos(g, True)
    want = {name: ("float", n) for name, n in infeed.items()}
    if mine != want:
        raise Wrong(f"{what}: the host sends batches only through the infeed's FIFOs "
                    f"{clipped(want, 200)}; your graph has host-to-device FIFOs "
                    f"{clipped(mine or 'none', 300)}")
    out = _fifos(g, False)
    if not out:
        raise Wrong(f"{what}: your loop sends nothing to the host: enqueue the result to "
                    "the outfeed (outfeed.enqueue(...)) in every iteration")
    if list(out.values()) != [("float", outfeed)]:
        raise Wrong(f"{what}: expected one outfeed of {plural(outfeed, 'float')} a step; "
                    f"your graph sends {clipped(out, 300)} to the host")
    _on_device_loop(prog, iterations, what)


def _judged_loop(sent, case, infeed: dict, batches: dict, outfeed: int, what: str,
                 reads=()):
    """The judge rebuilds the loop the kernel sent, connects the infeed's FIFOs to its own
    ``batches`` (FIFO name -> array of batches, fed in order and again from the start if
    the loop takes more) and the outfeed's to a list. Returns the engine and ``run()``,
    which runs the loop once and gives (batches taken so far, elements received so far)."""
    base = ipu.Graph(device(4).target)
    g, progs = rebuilt(output_field(sent, "graph", what), base, what, reads=reads)
    _feeds(g, progs[0], infeed, outfeed, case["iterations"], what)
    eng = loaded_engine(g, progs[0], what)
    taken = {name: 0 for name in batches}
    received = []

    def feed(name):
        def fill(buffer):
            data = batches[name]
            buffer[...] = data[taken[name] % len(data)].reshape(-1)
            taken[name] += 1
        return fill

    for name in batches:
        eng.connect_stream_to_callback(name, feed(name))
    (out,) = _fifos(eng.executable.graph, False)  # the one _feeds found
    eng.connect_stream_to_callback(out, lambda data: received.append(
        np.asarray(data, np.float64).copy()))

    def run():
        with judged_run(what):
            eng.run()
        return max(taken.values()), received

    return eng, run


def _codelet_outputs(got, pieces, want, what: str, asked: str, field: str) -> None:
    """Wrong unless each learner codelet's ``field`` on each of ``pieces`` is ``want``."""
    codelets = output_field(got, "codelets", what)
    if not isinstance(codelets, dict):
        raise Wrong(f"{what}: the trial gave no outputs of your codelets")
    for name, outs in codelets.items():
        if not isinstance(outs, list) or len(outs) != len(pieces):
            raise Wrong(f"{what}: the trial gave no output of codelet {clipped(name, 80)}")
        for piece, out, right in zip(pieces, outs, want):
            mine = output_array(output_field(out, field, what), np.shape(right),
                                f"{what}: your codelet {clipped(name, 80)}")
            if not np.allclose(mine, right, rtol=1e-5, atol=1e-6):
                shown = ", ".join(f"{k} = {np.array2string(np.asarray(v), precision=3)}"
                                  for k, v in piece.items())
                raise Wrong(f"{what}: your codelet {clipped(name, 80)} on {shown}: expected "
                            f"{field} = {np.array2string(np.asarray(right), precision=4)} "
                            f"({asked}), got {np.array2string(mine, precision=4)}")


def _loop_cases(rng) -> list[dict]:
    """Several images a batch, one image a batch, then random sizes; the images of two
    calls are the judge's (private); ``pieces``: inputs for the learner's codelet alone."""
    found = [(3, 4), (5, 2), (2, 1), (int(rng.integers(1, 7)), int(rng.integers(1, 6)))]
    return [{"iterations": n, "batch": b,
             "pieces": [{"x": rng.random(k).astype(np.float32)} for k in (1, 5, 16)],
             "_images": rng.random((2 * n * b, 4, 4)).astype(np.float32)}
            for n, b in found]


def _loop_what(case) -> str:
    return f"iterations={case['iterations']}, batches of {case['batch']} images"


def _loop_trial(case, build_loop):
    """The learner's loop as plain data, its codelet named as the kit's
    :class:`_BatchMean`, and what that codelet computes on ``pieces``."""
    return _loop_sent(case, build_loop, np.zeros((case["batch"], 4, 4), np.float32),
                      _loop_what(case), _BatchMean,
                      "x (Input(Vector(float32))) and out (Output(float32))", {"out": []})


@exercise("06.3", "an on-device loop with an infeed and an outfeed", points=3, hints=(
    "One Engine.run must run all the iterations: the loop is on the device, and body() "
    "builds ONE iteration.",
    "loops.repeat(n, body, inputs, infeed) calls body(*inputs, *infeed tensors) once and "
    "repeats what it returns; the mean needs a variable of its own, and each iteration "
    "ends by enqueueing it.",
    "mean = a [1] variable on a tile; body(mean, images) adds a compute set with a "
    "BatchMean vertex (x = images.flatten(), out = mean[0]) and returns [Execute, "
    "outfeed.enqueue(mean)]; return loops.repeat(iterations, body, [mean], infeed)."),
    answers=("build_loop",), cases=_loop_cases, trial=_loop_trial)
def check_infeed_loop(cases, outputs):
    """Exercise 06.3: ``build_loop(graph, infeed, outfeed, iterations)`` → on-device loop.
    The kernel sends the graph and program (:mod:`ipukit.graph_data`); the judge rebuilds
    them, feeds its own images, runs two calls and compares every mean the outfeed's FIFO
    receives with NumPy."""
    for case, got in zip(cases, outputs):
        what, iterations, batch = _loop_what(case), case["iterations"], case["batch"]
        _codelet_outputs(got, case["pieces"], [p["x"].mean(dtype=np.float64)
                                               for p in case["pieces"]],
                         what, "the mean of x", "out")
        images = np.asarray(case["_images"])
        means = images.astype(np.float64).reshape(2, iterations, -1).mean(axis=2)
        _, run = _judged_loop(got, case, {"infeed": batch * 16},
                              {"infeed": images.reshape(2 * iterations, batch, 4, 4)}, 1, what)
        for r in range(2):
            taken, received = run()
            if taken != (r + 1) * iterations:
                raise Wrong(f"{what}: after {r + 1} Engine.run call(s) the device took "
                            f"{taken} batches from the infeed, expected "
                            f"{(r + 1) * iterations} (one per iteration)")
            if len(received) != (r + 1) * iterations:
                raise Wrong(f"{what}: after {r + 1} Engine.run call(s) the outfeed got "
                            f"{len(received)} elements, expected {(r + 1) * iterations}: "
                            "enqueue once in every iteration")
            out = np.concatenate(received[r * iterations:])
            first_mismatch(means[r], out,
                           f"{what}: batch means the outfeed returned after run {r + 1}")


# -- 06.4: state that lives on the device across calls ---------------------------------------

def _max_cases(rng) -> list[dict]:
    """Three calls over images whose pixels are all negative (a maximum that starts at 0
    shows); one image per call; then random sizes. The images are the judge's; ``pieces``:
    inputs for the learner's codelet alone (best above and below the images)."""
    found = [(3, 4), (2, 5), (1, 1), (int(rng.integers(1, 5)), int(rng.integers(1, 6)))]
    return [{"iterations": n, "batch": b,
             "pieces": [{"images": rng.normal(size=k).astype(np.float32),
                         "best": np.float32([start])} for k, start in ((1, -9), (4, -9),
                                                                       (4, 9), (7, 0))],
             "_images": (rng.normal(size=(3 * n * b, 4, 4)) - 5).astype(np.float32)}
            for n, b in found]


def _max_what(case) -> str:
    return (f"iterations={case['iterations']}, batches of {case['batch']} images (all "
            "pixels < 0)")


def _max_trial(case, build_running_max):
    """The learner's loop as plain data, its codelet named as the kit's
    :class:`_PixelMax`, and what that codelet computes on ``pieces``."""
    return _loop_sent(case, build_running_max, np.zeros((case["batch"], 4, 4), np.float32),
                      _max_what(case), _PixelMax, "images (Input(Vector(float32))) and "
                      "best (InOut(Vector(float32)))", {"best": [1]})


@exercise("06.4", "a running maximum that outlives the call", points=3, hints=(
    "What must stay on the device between iterations, and between Engine.run calls? "
    "What is its value before the very first batch?",
    "Keep the maximum so far in a variable that the loop reads and writes (an InOut "
    "field); nothing resets it between calls. It must start below every pixel, and every "
    "iteration reduces its batch over the image axis only.",
    "best = a [4, 4] variable with graph.set_initial_value(best, a very negative value); "
    "body(best, images) adds a codelet with images Input and best InOut computing "
    "best = maximum(best, images.max over the batch axis), then outfeed.enqueue(best)."),
    answers=("build_running_max",), cases=_max_cases, trial=_max_trial)
def check_running_max(cases, outputs):
    """Exercise 06.4: ``build_running_max(graph, infeed, outfeed, iterations)`` → an
    on-device loop whose outfeed (mode LAST) gives, after every call, each pixel's
    maximum over every image the device has seen, in this call and all earlier ones. The
    kernel sends the graph and program; the judge rebuilds them, feeds its own images and
    reads the last element the outfeed's FIFO receives in each of three calls."""
    for case, got in zip(cases, outputs):
        what, batch = _max_what(case), case["batch"]
        _codelet_outputs(got, case["pieces"], [np.maximum(p["best"], p["images"].max())
                                               for p in case["pieces"]],
                         what, "the larger of best and the largest of images", "best")
        images = np.asarray(case["_images"])
        per_call = case["iterations"] * batch
        _, run = _judged_loop(got, case, {"infeed": batch * 16},
                              {"infeed": images.reshape(-1, batch, 4, 4)}, 16, what)
        for r in range(3):
            received = run()[1]
            if len(received) <= r:
                raise Wrong(f"{what}: call {r + 1} sent nothing to the outfeed: enqueue the "
                            "maximum in every iteration")
            got_max = received[-1].reshape(4, 4)
            want = images[:(r + 1) * per_call].max(axis=0)
            this_call = images[r * per_call:(r + 1) * per_call].max(axis=0)
            if r and np.allclose(got_max, this_call) and not np.allclose(want, this_call):
                raise Wrong(f"{what}: after call {r + 1} the outfeed gives the maximum of "
                            "this call's images only; the maximum must outlive the call")
            if np.allclose(got_max, 0) and r == 0:
                raise Wrong(f"{what}: after call 1 every pixel's maximum is 0, but every "
                            "pixel is negative: where does the maximum start?")
            first_mismatch(want, got_max, f"{what}: the running maximum after call {r + 1}")


# -- 06.5: a training loop on the device --------------------------------------------------------

def sgd_reference(x, y, iterations: int, batch: int, lr: float, w0):
    """Float64 NumPy: per batch, the mean squared error before the step, then
    w -= lr * 2/b * x^T (x w - y). Returns (losses, w)."""
    w, losses = np.asarray(w0, np.float64).copy(), []
    for k in range(iterations):
        xb, yb = x[k * batch:(k + 1) * batch].astype(np.float64), y[k * batch:(k + 1) * batch]
        err = xb @ w - yb
        losses.append(float((err ** 2).mean()))
        w -= lr * 2 / batch * xb.T @ err
    return np.array(losses), w


#: Engine.run calls per case of 06.5.
SGD_CALLS = 2


def _sgd_cases(rng) -> list[dict]:
    """Two calls of a few SGD steps on noisy linear data; one feature; then random sizes.
    The data are the judge's."""
    found = [(3, 8, 4, 0.05), (5, 4, 3, 0.1), (1, 6, 2, 0.2),
             (int(rng.integers(1, 7)), int(rng.integers(2, 9)), int(rng.integers(1, 5)),
              round(float(rng.uniform(0.01, 0.1)), 3))]
    cases = []
    for d, batch, iterations, lr in found:
        x = rng.normal(size=(SGD_CALLS * iterations * batch, d)).astype(np.float32)
        y = (x @ rng.normal(size=d) + 0.1 * rng.normal(size=len(x))).astype(np.float32)
        cases.append({"features": d, "batch": batch, "iterations": iterations, "lr": lr,
                      "_x": x, "_y": y})
    return cases


def _sgd_what(case) -> str:
    return (f"{case['features']} features, batches of {case['batch']}, {case['iterations']} "
            f"iterations, lr {case['lr']}")


def _sgd_trial(case, build_sgd):
    """The learner's training loop as plain data, its weights as the host read 'w'."""
    what, iterations, d, b = (_sgd_what(case), case["iterations"], case["features"],
                              case["batch"])
    g, infeed, outfeed = _queues((np.zeros((b, d), np.float32), np.zeros(b, np.float32)), b)
    with naming(what):
        got = build_sgd(g, infeed, outfeed, iterations, case["lr"], d)
    if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], ipu.Tensor)):
        raise Wrong(f"{what}: return a pair (the loop program, the weights tensor), got "
                    f"{got!r}"[:400])
    prog, w = got
    _on_device_loop(prog, iterations, what)
    if w.num_elements() != d:
        raise Wrong(f"{what}: the weights should hold {d} numbers, got shape {w.shape}")
    g.create_host_read("w", w)
    return sent_graph(g, prog, what)


@exercise("06.5", "linear regression trained on the device", points=3, hints=(
    "Per iteration: the prediction, the error, the loss to outfeed, the gradient, the "
    "update. Which of these must survive to the next iteration and the next call?",
    "The weights are a variable (initial value zero) passed to loops.repeat as an input; "
    "body(w, x, y) builds one step with poplin.mat_mul and popops ops; the loss is the "
    "batch's mean squared error BEFORE the update; d(loss)/dw = 2/b x^T (x w - y).",
    "pred = mat_mul(x, w); err = map(_1 - _2, [pred, y.reshape([b, 1])]); loss = "
    "reduce(map(_1 * _1, [err]), [0, 1], ADD) scaled by 1/b; grad = mat_mul(x.transpose(), "
    "err); popops.scaled_add_to(w, grad, -2 * lr / b); enqueue the loss; return "
    "(loops.repeat(iterations, body, [w], infeed), w)."),
    answers=("build_sgd",), cases=_sgd_cases, trial=_sgd_trial)
def check_sgd(cases, outputs):
    """Exercise 06.5: ``build_sgd(graph, infeed, outfeed, iterations, learning_rate,
    num_features)`` → ``(program, w)``: an on-device loop of SGD steps on batches (x, y)
    from the infeed, outfeeding each batch's mean squared error, with the weights ``w``
    (zero at first) kept on the device across calls. The kernel sends the graph and
    program; the judge rebuilds them, feeds its own (x, y), runs two calls and compares
    the losses and w with NumPy."""
    for case, sent in zip(cases, outputs):
        what, iterations, batch = _sgd_what(case), case["iterations"], case["batch"]
        d = case["features"]
        x, y = np.asarray(case["_x"]), np.asarray(case["_y"])
        eng, run = _judged_loop({"graph": sent}, case, {"infeed/0": batch * d,
                                                        "infeed/1": batch},
                                {"infeed/0": x.reshape(-1, batch, d),
                                 "infeed/1": y.reshape(-1, batch)}, 1, what, reads=("w",))
        w_ref = np.zeros(d)
        for c in range(SGD_CALLS):
            part = slice(c * iterations * batch, (c + 1) * iterations * batch)
            losses, w_ref = sgd_reference(x[part], y[part], iterations, batch, case["lr"],
                                          w_ref)
            received = run()[1]
            got = np.concatenate(received[c * iterations:]) if received else np.zeros(0)
            if got.size == losses.size and np.allclose(got, losses * batch, rtol=1e-3):
                raise Wrong(f"{what}: your losses are {batch} x too big: outfeed the MEAN "
                            "squared error of the batch")
            first_mismatch(losses, got, f"{what}: the losses outfed by call {c + 1}",
                           rtol=1e-3, atol=1e-5)
            with judged_run(what):
                w = eng.read_tensor("w").astype(np.float64).reshape(-1)
            first_mismatch(w_ref, w, f"{what}: w after call {c + 1}", rtol=1e-3, atol=1e-5)


# -- 06.6: several programs in one Engine, a loop that stops on the device ----------------------

def collatz_steps(n: int) -> int:
    """Steps of n -> n / 2 (n even) or 3n + 1 (n odd) until n is 1 (0 for n = 1)."""
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def _collatz_path(n: int, shown: int = 8) -> str:
    path = [n]
    while path[-1] != 1 and len(path) <= shown:
        path.append(path[-1] // 2 if path[-1] % 2 == 0 else 3 * path[-1] + 1)
    return ", ".join(map(str, path)) + (", ..., 1" if path[-1] != 1 else "")


#: Emulated steps one ``engine.run`` of 06.6 may take (kit convention: a loop whose
#: predicate never turns false stops there with an error; on an IPU it would never end).
COLLATZ_MAX_STEPS = 5000


class _IsOdd(ipu.Vertex):
    """odd = whether n is odd (the notebook's codelet, as the judge runs it)."""

    n = ipu.Input(ipu.UNSIGNED_INT)
    odd = ipu.Output(ipu.BOOL)

    def compute(self):
        self.odd[...] = self.n % 2 == 1


class _Halve(ipu.Vertex):
    """n = n / 2 (the notebook's codelet, as the judge runs it)."""

    n = ipu.InOut(ipu.UNSIGNED_INT)

    def compute(self):
        self.n[...] = self.n // 2


class _TriplePlusOne(ipu.Vertex):
    """n = 3n + 1 (the notebook's codelet, as the judge runs it)."""

    n = ipu.InOut(ipu.UNSIGNED_INT)

    def compute(self):
        self.n[...] = 3 * self.n + 1


class _Count(ipu.Vertex):
    """steps = steps + 1 (the notebook's codelet, as the judge runs it)."""

    steps = ipu.InOut(ipu.UNSIGNED_INT)

    def compute(self):
        self.steps[...] = self.steps + 1


class _NotOne(ipu.Vertex):
    """go = whether n is not 1 (the learner's codelet, as the judge runs it)."""

    n = ipu.Input(ipu.UNSIGNED_INT)
    go = ipu.Output(ipu.BOOL)

    def compute(self):
        self.go[...] = self.n != 1


#: 06.6's codelets by name: (the kit's copy the judge runs, the field the judge reads back
#: from the learner's own, what it computes from n or steps).
COLLATZ_CODELETS = {
    "IsOdd": (_IsOdd, "odd", lambda n: n % 2 == 1),
    "Halve": (_Halve, "n", lambda n: n // 2),
    "TriplePlusOne": (_TriplePlusOne, "n", lambda n: 3 * n + 1),
    "Count": (_Count, "steps", lambda steps: steps + 1),
    "NotOne": (_NotOne, "go", lambda n: n != 1),
}


def _collatz_stand_ins(g, what: str) -> dict:
    """The learner's codelets of ``g``, each -> the kit's codelet of the same name and
    fields (the kernel's side), or Wrong naming one that is not the exercise's."""
    found = {}
    for cls in learner_codelets(g):
        reference = COLLATZ_CODELETS.get(cls.__name__, (None,))[0]
        if reference is None or not same_fields(cls, reference):
            raise Wrong(f"{what}: codelet '{cls.__name__}' is not one of the exercise's "
                        f"({', '.join(COLLATZ_CODELETS)}) with their fields; build the "
                        "loop from those"[:400])
        found[cls] = reference
    return found


def _collatz_cases(rng) -> list[dict]:
    """Start values loaded one after another into the same engine (program 0 must reset
    the counter): n = 1 first (the condition runs before the body: no step), one halving,
    27 (111 steps), small odd and even starts; then random starts in a second engine. The
    starts are the judge's; ``pieces``: n (and steps) values for the codelets alone."""
    cases = []
    for starts in ([1, 2, 27, 6, 7], [int(s) for s in rng.integers(3, 10_000, 3)]):
        values = [1, 2, 3, *(int(v) for v in rng.integers(4, 100_000, 3))]
        cases.append({"pieces": [{"n": np.uint32(v), "steps": np.uint32(v)} for v in values],
                      "_starts": starts, "_steps": [collatz_steps(s) for s in starts]})
    return cases


def _collatz_trial(case, build_collatz):
    """The learner's three programs and graph as plain data (its codelets sent as the kit's
    of the same name), and what each of its codelets computes on ``pieces``."""
    what = "build_collatz(graph, start, steps_out)"
    g = ipu.Graph(device(1).target)
    start = g.add_host_to_device_fifo("start", ipu.UNSIGNED_INT, 1)
    steps_out = g.add_device_to_host_fifo("steps", ipu.UNSIGNED_INT, 1)
    with naming(what):
        progs = build_collatz(g, start, steps_out)
    if not (isinstance(progs, list | tuple) and len(progs) == 3
            and all(isinstance(p, ipu.Program) for p in progs)):
        raise Wrong(f"{what}: return the list of three programs [init, run, read], got "
                    f"{progs!r}"[:400])
    mine = _collatz_stand_ins(g, what)
    try:
        sent = graph_data.to_plain(g, list(progs), mine)
    except graph_data.GraphDataError as exc:
        raise Wrong(f"{what}: {exc}") from None
    codelets = {}
    for cls in mine:
        field = COLLATZ_CODELETS[cls.__name__][1]
        fields = [f for f in ("n", "steps") if f in cls.fields]
        with naming(f"{what}: codelet {cls.__name__}"):
            runs = codelet_runs(cls, [{f: p[f] for f in fields} for p in case["pieces"]],
                                {field: []})
        codelets[cls.__name__] = [r[field] for r in runs]
    return {"graph": sent, "codelets": codelets}


def _collatz_codelets(got, case) -> None:
    """Wrong unless each of the learner's codelets computed what its name says (judge)."""
    codelets = output_field(got, "codelets", "build_collatz")
    if not isinstance(codelets, dict):
        raise Wrong("build_collatz: the trial gave no outputs of your codelets")
    for name, outs in codelets.items():
        if name not in COLLATZ_CODELETS:
            raise Wrong(f"build_collatz: codelet {clipped(name, 80)} is not the exercise's")
        _, field, rule = COLLATZ_CODELETS[name]
        outs = output_array(outs, [len(case["pieces"])], f"your codelet {name}")
        for piece, mine in zip(case["pieces"], outs):
            given = int(piece["steps" if field == "steps" else "n"])
            right = int(rule(given))
            if int(mine) != right:
                raise Wrong(f"your codelet {name} on {'steps' if field == 'steps' else 'n'}"
                            f" = {given}: expected {field} = {right}, got {mine:g}")


def _collatz_streams(g) -> None:
    """Wrong unless the rebuilt graph keeps the exercise's two FIFOs (the judge's side)."""
    for name, to_device in (("start", True), ("steps", False)):
        s = g.streams.get(name)
        if s is None or (bool(s.to_device), s.dtype, int(s.n)) != (
                to_device, np.dtype(np.uint32), 1):
            raise Wrong(f"build_collatz: your graph does not keep the exercise's stream "
                        f"'{name}' (one UNSIGNED_INT {'to' if to_device else 'from'} the "
                        "device)")


@exercise("06.6", "programs by index, a loop that stops on the device", points=3, hints=(
    "Three programs, one engine: which one runs when the host calls engine.run(1)? Does "
    "your loop look at n before its first step, and what does the counter hold when the "
    "host loads the next start value?",
    "Engine(graph, [init, run, read]) numbers the programs 0, 1, 2. RepeatWhileTrue(cond, "
    "go, body) runs cond (which sets the scalar go) first, then body and cond again while "
    "go is true: for n = 1 the body never runs. If(odd, a, b) runs a when odd is true, else "
    "b. Tensors keep their values between engine.run calls, so init must reset the counter.",
    "n, steps: UNSIGNED_INT variables of shape []; odd, go: BOOL []; init = Sequence(Copy("
    "start, n), Copy(a zero constant, steps)); body = Sequence(Execute(IsOdd), If(odd, "
    "Execute(TriplePlusOne), Execute(Halve)), Execute(Count)); run = RepeatWhileTrue("
    "Execute(NotOne), go, body); read = Copy(steps, steps_out); return [init, run, read]."),
    answers=("build_collatz",), cases=_collatz_cases, trial=_collatz_trial)
def check_collatz(cases, outputs):
    """Exercise 06.6: ``build_collatz(graph, start, steps_out)`` → ``[init, run, read]``:
    program 0 loads n from the stream ``start`` and zeroes a counter, program 1 counts on
    the device the Collatz steps from n to 1 (RepeatWhileTrue, If), program 2 sends the
    count to the stream ``steps_out``. The kernel sends the graph and the three programs;
    the judge rebuilds them into one Engine, loads its own start values one after another
    and reads the counts."""
    for case, got in zip(cases, outputs):
        starts, wants = case["_starts"], case["_steps"]
        _collatz_codelets(got, case)
        eng = rebuilt_engine(output_field(got, "graph", "build_collatz"),
                             ipu.Graph(device(1).target), "build_collatz",
                             check=_collatz_streams, programs=3,
                             max_steps=COLLATZ_MAX_STEPS)
        host_in, host_out = np.zeros(1, np.uint32), np.zeros(1, np.uint32)
        eng.connect_stream("start", host_in)
        eng.connect_stream("steps", host_out)
        before = None
        for k, (n, want) in enumerate(zip(starts, wants)):
            what = f"start n = {n}" + (f" (loaded after {starts[:k]})" if k else "")
            host_in[0] = n
            with judged_run(what):
                for program in (0, 1, 2):
                    eng.run(program)
                first = int(host_out[0])
                eng.run(1)
                eng.run(2)
            again = int(host_out[0])
            if first != want:
                raise Wrong(f"{what}: engine.run(0), run(1), run(2) gave {first} steps, "
                            f"expected {want} ({_collatz_path(n)})"
                            + _collatz_diagnosis(n, want, first, before))
            if again != want:
                raise Wrong(f"{what}: running program 1 again once n is 1, then program 2, "
                            f"gave {again} steps, expected still {want}: RepeatWhileTrue "
                            "runs its condition program before each pass, so with n = 1 "
                            "the body must not run")
            before = want


def _collatz_diagnosis(n: int, want: int, got: int, before: int | None) -> str:
    if n == 1 and got > 0:
        return (". The body ran before the condition: RepeatWhileTrue(cond, predicate, body) "
                "runs cond first, and the body only while the predicate is true")
    if before is not None and got == before + want:
        return (f". That adds the previous start's {before} steps: program 0 must set the "
                "counter to 0")
    if before is not None and got == before != want:
        return (". That is the previous start's count: does program 2 copy the counter to "
                "the stream steps_out?")
    return ""
