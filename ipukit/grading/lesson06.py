"""The ``check_*`` functions of lesson 06: the host and the IPU.

Each check measures its reference on the emulator: a stream copy's cycles from the
compiled ``Step``, a loop's host-sync share from the ``Trace`` of real runs, an infeed's
batches against NumPy, a running maximum's outfeed against NumPy across several calls.

>>> from ipukit.grading import lesson06
>>> r = lesson06.check_running_max(lambda *args: None, show=False)
>>> print(r.text().splitlines()[0])
WRONG · Exercise 06.4 · a running maximum that outlives the call: 0/3 points
"""

from __future__ import annotations

import math

import numpy as np

import ipukit as ipu
from ipukit.host import InfeedQueue, OutfeedMode, OutfeedQueue

from .common import BusyVertex as _Busy
from .common import device
from .feedback import Wrong, as_int, exercise, first_mismatch, library_error

# -- 06.1 ---------------------------------------------------------------------------------


def _stream_step(version: str, tiles: int, per_tile: np.ndarray, to_device: bool):
    """Compile one stream copy of a float tensor mapped ``per_tile[t]`` floats on tile t."""
    dev = ipu.IPUModel(version, tiles_per_ipu=tiles).create_device()
    g = ipu.Graph(dev.target)
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


def _stream_cases():
    rng = np.random.default_rng(61)
    yield "ipu2", 4, np.array([256, 0, 0, 0]), True  # one tile's 4 B/cycle limits
    yield "ipu2", 64, np.full(64, 16), True  # 4 KiB over 64 tiles: the PCIe link limits
    yield "bow", 16, rng.integers(0, 200, 16), False
    yield "ipu1", 32, rng.integers(0, 40, 32), True
    yield "ipu2", 8, rng.integers(1, 3000, 8), False


def _device_loop(g, prog, iterations, dev, infeed, outfeed, what):
    """The learner's loop must be ``loops.repeat``'s ``ipu.Repeat(iterations, ...)``: compile
    it, load it and connect the queues."""
    if not isinstance(prog, ipu.Repeat) or prog.count != iterations:
        raise Wrong(f"{what}: expected the on-device loop ipu.Repeat({iterations}, ...) "
                    f"that loops.repeat returns, got {prog!r}")
    try:
        eng = ipu.Engine(g, prog)
    except ipu.IpuError as exc:
        raise Wrong(library_error(f"{what}: your loop does not compile", exc)) from None
    eng.load(dev)
    infeed.connect(eng)
    outfeed.connect(eng)
    return eng


@exercise("06.1", "the cost of a stream copy", points=2, hints=(
    "Two things carry the bytes one after the other: the PCIe link and the tiles. Which "
    "one limits the step?",
    "A stream copy is one superstep: a sync, then an exchange as long as the slower of "
    "the busiest tile (its own bytes, 4 per cycle) and the host link, which carries ALL "
    "the bytes at target.host_link_bytes_per_cycle.",
    "target.sync_cycles + max(ceil(max bytes of one tile / exchange_bytes_per_cycle), "
    "ceil(total bytes / host_link_bytes_per_cycle))."))
def check_stream_copy_cycles(stream_copy_cycles):
    """Exercise 06.1: ``stream_copy_cycles(target, tile_bytes)`` → cycles of a StreamCopy."""

    for version, tiles, floats, to_device in _stream_cases():
        target, step = _stream_step(version, tiles, floats, to_device)
        tile_bytes = step.tile_bytes_in if to_device else step.tile_bytes_out
        what = (f"a StreamCopy {'host -> IPU' if to_device else 'IPU -> host'} of "
                f"{int(tile_bytes.sum()):,} B on {tiles} tiles of '{version}' (at most "
                f"{int(tile_bytes.max()):,} B on one tile)")
        got = as_int(stream_copy_cycles(target, tile_bytes.copy()), what,
                     "whole number of cycles or bytes")
        if got != step.cycles:
            raise Wrong(f"{what}: the Trace's step takes {step.cycles} cycles "
                        f"(sync {step.sync_cycles} + exchange {step.exchange_cycles}), "
                        f"you said {got}" + _stream_diagnosis(target, tile_bytes, got))


def _stream_diagnosis(target, tile_bytes, got: int) -> str:
    sync = target.sync_cycles
    tile = -(-int(tile_bytes.max()) // target.exchange_bytes_per_cycle)
    link = math.ceil(int(tile_bytes.sum()) / target.host_link_bytes_per_cycle)
    if got == sync + tile:
        return (f". That is the busiest tile's time alone; every byte also crosses the one "
                f"PCIe link ({target.host_link_bytes_per_cycle:.2f} B/cycle): {link} cycles")
    if got == sync + link:
        return f". That is the PCIe link alone; the busiest tile needs {tile} cycles"
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


@exercise("06.2", "how many steps per host call", points=2, hints=(
    "Write down how long one call of N steps takes, and how much of it the device works.",
    "One Engine.run of N steps takes H + N*B cycles (H = target.host_sync_cycles), of "
    "which N*B are on the device; the share grows with N, so look for the first N that "
    "reaches the efficiency.",
    "Solve N*B / (H + N*B) >= e for N: N >= e*H / ((1 - e)*B); round up, and at least 1."))
def check_steps_per_call(steps_per_call):
    """Exercise 06.2: ``steps_per_call(target, step_cycles, efficiency)`` → smallest N."""

    for version, k, efficiency in [("ipu2", 64, 0.5), ("ipu2", 256, 0.9),
                                   ("bow", 1000, 0.75), ("ipu1", 16, 0.99),
                                   ("ipu2", 20_000, 0.2)]:
        target = ipu.IPUModel(version, tiles_per_ipu=4).create_device().target
        B, expected = _smallest_steps(version, k, efficiency)
        what = (f"'{version}' (host sync {target.host_sync_cycles:,} cycles), a step of "
                f"B = {B:,} cycles, efficiency {efficiency}")
        n = as_int(steps_per_call(target, B, efficiency), what)
        if n < 1:
            raise Wrong(f"{what}: expected at least 1 step per Engine.run, got {n}")
        if n < expected:
            share = _device_share(version, k, n)[0]
            raise Wrong(f"{what}: with N = {n} steps per Engine.run the device works "
                        f"{share:.2%} of the time (measured in the Trace), below "
                        f"{efficiency:.0%}; N is too small")
        if n > expected:
            share = _device_share(version, k, expected)[0]
            raise Wrong(f"{what}: N = {expected} already keeps the device working "
                        f"{share:.2%} of the time (>= {efficiency:.0%}); you said "
                        f"{n:,}, expected the smallest such N")


# -- 06.3 ---------------------------------------------------------------------------------


def _infeed_case(iterations: int, batch: int, mode, seed: int):
    """Random 4 x 4 "images" for two runs, a 4-tile graph and the queues to build on."""
    rng = np.random.default_rng(seed)
    images = rng.random((2 * iterations * batch, 4, 4)).astype(np.float32)
    dev = device(4)
    g = ipu.Graph(dev.target)
    infeed = InfeedQueue(images, batch_size=batch)
    outfeed = OutfeedQueue(mode)
    return images, dev, g, infeed, outfeed


@exercise("06.3", "an on-device loop with an infeed and an outfeed", points=3, hints=(
    "One Engine.run must run all the iterations: the loop is on the device, and body() "
    "builds ONE iteration.",
    "loops.repeat(n, body, inputs, infeed) calls body(*inputs, *infeed tensors) once and "
    "repeats what it returns; the mean needs a variable of its own, and each iteration "
    "ends by enqueueing it.",
    "mean = a [1] variable on a tile; body(mean, images) adds a compute set with a "
    "BatchMean vertex (x = images.flatten(), out = mean[0]) and returns [Execute, "
    "outfeed.enqueue(mean)]; return loops.repeat(iterations, body, [mean], infeed)."))
def check_infeed_loop(build_loop):
    """Exercise 06.3: ``build_loop(graph, infeed, outfeed, iterations)`` → on-device loop."""

    for iterations, batch, mode, seed in [(3, 4, OutfeedMode.ALL, 1),
                                          (5, 2, OutfeedMode.LAST, 2)]:
        images, dev, g, infeed, outfeed = _infeed_case(iterations, batch, mode, seed)
        what = f"iterations={iterations}, batches of {batch} images, {mode}"
        prog = build_loop(g, infeed, outfeed, iterations)
        eng = _device_loop(g, prog, iterations, dev, infeed, outfeed, what)
        means = images.reshape(2, iterations, -1).mean(axis=2)
        for r in range(2):
            eng.run()
            if infeed.num_dequeued != (r + 1) * iterations:
                raise Wrong(f"{what}: after {r + 1} Engine.run call(s) the device took "
                            f"{infeed.num_dequeued} batches from the infeed, expected "
                            f"{(r + 1) * iterations} (one per iteration)")
            if outfeed.num_enqueued != (r + 1) * iterations:
                raise Wrong(f"{what}: after {r + 1} Engine.run call(s) the outfeed got "
                            f"{outfeed.num_enqueued} elements, expected "
                            f"{(r + 1) * iterations}: enqueue once in every iteration")
            got = np.asarray(outfeed.dequeue(), np.float32).reshape(-1)
            expected = means[r] if mode is OutfeedMode.ALL else means[r, -1:]
            first_mismatch(expected, got,
                            f"{what}: batch means the outfeed returned after run {r + 1}")
        if eng.trace.num_runs != 2:
            raise Wrong(f"{what}: expected 2 Engine.run calls, the Trace has "
                        f"{eng.trace.num_runs}")


# -- 06.4: state that lives on the device across calls ---------------------------------------

@exercise("06.4", "a running maximum that outlives the call", points=3, hints=(
    "What must stay on the device between iterations, and between Engine.run calls? "
    "What is its value before the very first batch?",
    "Keep the maximum so far in a variable that the loop reads and writes (an InOut "
    "field); nothing resets it between calls. It must start below every pixel, and every "
    "iteration reduces its batch over the image axis only.",
    "best = a [4, 4] variable with graph.set_initial_value(best, a very negative value); "
    "body(best, images) adds a codelet with images Input and best InOut computing "
    "best = maximum(best, images.max over the batch axis), then outfeed.enqueue(best)."))
def check_running_max(build_running_max):
    """Exercise 06.4: ``build_running_max(graph, infeed, outfeed, iterations)`` → an
    on-device loop whose outfeed (mode LAST) gives, after every call, each pixel's
    maximum over every image the device has seen, in this call and all earlier ones."""
    rng = np.random.default_rng(604)
    for iterations, batch in [(3, 4), (2, 5)]:
        images = (rng.normal(size=(3 * iterations * batch, 4, 4)) - 5).astype(np.float32)
        dev = device(4)
        g = ipu.Graph(dev.target)
        infeed = InfeedQueue(images, batch_size=batch)
        outfeed = OutfeedQueue(OutfeedMode.LAST)
        what = f"iterations={iterations}, batches of {batch} images (all pixels < 0)"
        prog = build_running_max(g, infeed, outfeed, iterations)
        eng = _device_loop(g, prog, iterations, dev, infeed, outfeed, what)
        per_call = iterations * batch
        for r in range(3):
            eng.run()
            got = np.asarray(outfeed.dequeue(), np.float32).reshape(-1, 4, 4)[-1]
            want = images[:(r + 1) * per_call].max(axis=0)
            if r and np.allclose(got, images[r * per_call:(r + 1) * per_call].max(axis=0)):
                raise Wrong(f"{what}: after call {r + 1} the outfeed gives the maximum of "
                            "this call's images only; the maximum must outlive the call")
            if np.allclose(got, 0) and r == 0:
                raise Wrong(f"{what}: after call 1 every pixel's maximum is 0, but every "
                            "pixel is negative: where does the maximum start?")
            first_mismatch(want, got, f"{what}: the running maximum after call {r + 1}")


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


@exercise("06.5", "linear regression trained on the device", points=3, hints=(
    "Per iteration: the prediction, the error, the loss to outfeed, the gradient, the "
    "update. Which of these must survive to the next iteration and the next call?",
    "The weights are a variable (initial value zero) passed to loops.repeat as an input; "
    "body(w, x, y) builds one step with poplin.mat_mul and popops ops; the loss is the "
    "batch's mean squared error BEFORE the update; d(loss)/dw = 2/b x^T (x w - y).",
    "pred = mat_mul(x, w); err = map(_1 - _2, [pred, y.reshape([b, 1])]); loss = "
    "reduce(map(_1 * _1, [err]), [0, 1], ADD) scaled by 1/b; grad = mat_mul(x.transpose(), "
    "err); popops.scaled_add_to(w, grad, -2 * lr / b); enqueue the loss; return "
    "(loops.repeat(iterations, body, [w], infeed), w)."))
def check_sgd(build_sgd):
    """Exercise 06.5: ``build_sgd(graph, infeed, outfeed, iterations, learning_rate,
    num_features)`` → ``(program, w)``: an on-device loop of SGD steps on batches (x, y)
    from the infeed, outfeeding each batch's mean squared error, with the weights ``w``
    (zero at first) kept on the device across calls."""
    rng = np.random.default_rng(605)
    for d, batch, iterations, lr in [(3, 8, 4, 0.05), (5, 4, 3, 0.1)]:
        calls = 2
        x = rng.normal(size=(calls * iterations * batch, d)).astype(np.float32)
        y = (x @ rng.normal(size=d) + 0.1 * rng.normal(size=len(x))).astype(np.float32)
        dev = device(4)
        g = ipu.Graph(dev.target)
        infeed = InfeedQueue((x, y), batch_size=batch)
        outfeed = OutfeedQueue(OutfeedMode.ALL)
        what = f"{d} features, batches of {batch}, {iterations} iterations, lr {lr}"
        got = build_sgd(g, infeed, outfeed, iterations, lr, d)
        if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], ipu.Tensor)):
            raise Wrong(f"{what}: return a pair (the loop program, the weights tensor), got "
                        f"{got!r}")
        prog, w = got
        if not isinstance(prog, ipu.Repeat) or prog.count != iterations:
            raise Wrong(f"{what}: expected the on-device loop ipu.Repeat({iterations}, ...) "
                        f"that loops.repeat returns, got {prog!r}")  # before w is read
        if w.num_elements() != d:
            raise Wrong(f"{what}: the weights should hold {d} numbers, got shape {w.shape}")
        g.create_host_read("w", w)
        eng = _device_loop(g, prog, iterations, dev, infeed, outfeed, what)
        w_ref = np.zeros(d)
        for c in range(calls):
            eng.run()
            part = slice(c * iterations * batch, (c + 1) * iterations * batch)
            losses, w_ref = sgd_reference(x[part], y[part], iterations, batch, lr, w_ref)
            got_losses = np.asarray(outfeed.dequeue(), np.float64).reshape(-1)
            if got_losses.size == losses.size and np.allclose(got_losses, losses * batch,
                                                              rtol=1e-3):
                raise Wrong(f"{what}: your losses are {batch} x too big: outfeed the MEAN "
                            "squared error of the batch")
            first_mismatch(losses, got_losses, f"{what}: the losses outfed by call {c + 1}",
                           rtol=1e-3, atol=1e-5)
            first_mismatch(w_ref, eng.read_tensor("w").reshape(-1),
                           f"{what}: w after call {c + 1}", rtol=1e-3, atol=1e-5)
