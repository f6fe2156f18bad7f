"""The ``check_*`` functions of lesson 06: the host and the IPU.

Every check is judged (:func:`ipukit.grading.feedback.exercise`): the judge draws the
cases and works out the expected answers with the kit's own code (a stream copy's cycles
from the compiled ``Step``, a loop's host-sync share from the ``Trace`` of real runs,
batch means, running maxima, SGD and Collatz counts from NumPy and Python); the learner's
kernel only runs the learner's functions and returns what came out.

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
from .common import as_count, device, naming, output_array, output_field
from .feedback import Wrong, as_int, exercise, first_mismatch, library_error


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


def _device_loop(g, prog, iterations, dev, infeed, outfeed, what):
    """The learner's loop must be ``loops.repeat``'s ``ipu.Repeat(iterations, ...)``: compile
    it, load it and connect the queues (the trial's side)."""
    if not isinstance(prog, ipu.Repeat) or prog.count != iterations:
        raise Wrong(f"{what}: expected the on-device loop ipu.Repeat({iterations}, ...) "
                    f"that loops.repeat returns, got {prog!r}")
    try:
        eng = ipu.Engine(g, prog)
    except ipu.IpuError as exc:
        raise Wrong(library_error(f"{what}: your loop does not compile", exc)) from None
    with naming(what):
        eng.load(dev)
        infeed.connect(eng)
        outfeed.connect(eng)
    return eng


def _queues(data, batch: int, mode: str):
    """A fresh 4-tile device and graph, an infeed of ``data`` and an outfeed in ``mode``."""
    dev = device(4)
    return dev, ipu.Graph(dev.target), InfeedQueue(data, batch_size=batch), OutfeedQueue(
        OutfeedMode[mode])


def _calls(build, case, data, mode: str, calls: int, read, what: str):
    """The learner's ``build(graph, infeed, outfeed, iterations)`` loop, fed ``data`` in
    batches and run ``calls`` times: the engine, and ``read(infeed, outfeed)`` after each
    call (the trial's side)."""
    dev, g, infeed, outfeed = _queues(data, case["batch"], mode)
    with naming(what):
        prog = build(g, infeed, outfeed, case["iterations"])
    eng = _device_loop(g, prog, case["iterations"], dev, infeed, outfeed, what)
    found = []
    for _ in range(calls):
        with naming(what):
            eng.run()
            found.append(read(infeed, outfeed))
    return eng, found


def _loop_cases(rng) -> list[dict]:
    """ALL and LAST, one image per batch, then random sizes; images for two calls."""
    found = [(3, 4, "ALL"), (5, 2, "LAST"), (2, 1, "ALL"),
             (int(rng.integers(1, 7)), int(rng.integers(1, 6)), str(rng.choice(["ALL",
                                                                                "LAST"])))]
    return [{"iterations": n, "batch": b, "mode": mode,
             "images": rng.random((2 * n * b, 4, 4)).astype(np.float32)}
            for n, b, mode in found]


def _loop_what(case) -> str:
    return (f"iterations={case['iterations']}, batches of {case['batch']} images, "
            f"OutfeedMode.{case['mode']}")


def _loop_trial(case, build_loop):
    eng, runs = _calls(build_loop, case, case["images"], case["mode"], 2, lambda i, o: {
        "dequeued": i.num_dequeued, "enqueued": o.num_enqueued,
        "out": np.asarray(o.dequeue(), np.float32).reshape(-1)}, _loop_what(case))
    return {"runs": runs, "num_runs": eng.trace.num_runs}


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
    """Exercise 06.3: ``build_loop(graph, infeed, outfeed, iterations)`` → on-device loop."""
    for case, got in zip(cases, outputs):
        what, iterations = _loop_what(case), case["iterations"]
        means = np.asarray(case["images"], np.float64).reshape(2, iterations, -1).mean(axis=2)
        runs = output_field(got, "runs", what)
        if not isinstance(runs, list) or len(runs) != 2:
            raise Wrong(f"{what}: the trial gave no result for two Engine.run calls")
        for r, run in enumerate(runs):
            dequeued = as_int(output_field(run, "dequeued", what), what)
            if dequeued != (r + 1) * iterations:
                raise Wrong(f"{what}: after {r + 1} Engine.run call(s) the device took "
                            f"{dequeued} batches from the infeed, expected "
                            f"{(r + 1) * iterations} (one per iteration)")
            enqueued = as_int(output_field(run, "enqueued", what), what)
            if enqueued != (r + 1) * iterations:
                raise Wrong(f"{what}: after {r + 1} Engine.run call(s) the outfeed got "
                            f"{enqueued} elements, expected {(r + 1) * iterations}: enqueue "
                            "once in every iteration")
            expected = means[r] if case["mode"] == "ALL" else means[r, -1:]
            out = output_array(output_field(run, "out", what), None, what)
            first_mismatch(expected, out,
                           f"{what}: batch means the outfeed returned after run {r + 1}")
        runs = as_int(output_field(got, "num_runs", what), what)
        if runs != 2:
            raise Wrong(f"{what}: expected 2 Engine.run calls, the Trace has {runs}")


# -- 06.4: state that lives on the device across calls ---------------------------------------

def _max_cases(rng) -> list[dict]:
    """Three calls over images whose pixels are all negative (a maximum that starts at 0
    shows); one image per call; then random sizes."""
    found = [(3, 4), (2, 5), (1, 1), (int(rng.integers(1, 5)), int(rng.integers(1, 6)))]
    return [{"iterations": n, "batch": b,
             "images": (rng.normal(size=(3 * n * b, 4, 4)) - 5).astype(np.float32)}
            for n, b in found]


def _max_what(case) -> str:
    return (f"iterations={case['iterations']}, batches of {case['batch']} images (all "
            "pixels < 0)")


def _max_trial(case, build_running_max):
    return _calls(build_running_max, case, case["images"], "LAST", 3, lambda i, o: np.asarray(
        o.dequeue(), np.float32).reshape(-1, 4, 4)[-1], _max_what(case))[1]


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
    maximum over every image the device has seen, in this call and all earlier ones."""
    for case, maxima in zip(cases, outputs):
        what, images = _max_what(case), np.asarray(case["images"], np.float64)
        per_call = case["iterations"] * case["batch"]
        if not isinstance(maxima, list) or len(maxima) != 3:
            raise Wrong(f"{what}: the trial gave no result for three Engine.run calls")
        for r, got in enumerate(maxima):
            got = output_array(got, (4, 4), f"{what}: the running maximum after call {r + 1}")
            want = images[:(r + 1) * per_call].max(axis=0)
            this_call = images[r * per_call:(r + 1) * per_call].max(axis=0)
            if r and np.allclose(got, this_call) and not np.allclose(want, this_call):
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


#: Engine.run calls per case of 06.5.
SGD_CALLS = 2


def _sgd_cases(rng) -> list[dict]:
    """Two calls of a few SGD steps on noisy linear data; one feature; then random sizes."""
    found = [(3, 8, 4, 0.05), (5, 4, 3, 0.1), (1, 6, 2, 0.2),
             (int(rng.integers(1, 7)), int(rng.integers(2, 9)), int(rng.integers(1, 5)),
              round(float(rng.uniform(0.01, 0.1)), 3))]
    cases = []
    for d, batch, iterations, lr in found:
        x = rng.normal(size=(SGD_CALLS * iterations * batch, d)).astype(np.float32)
        y = (x @ rng.normal(size=d) + 0.1 * rng.normal(size=len(x))).astype(np.float32)
        cases.append({"features": d, "batch": batch, "iterations": iterations, "lr": lr,
                      "x": x, "y": y})
    return cases


def _sgd_what(case) -> str:
    return (f"{case['features']} features, batches of {case['batch']}, {case['iterations']} "
            f"iterations, lr {case['lr']}")


def _sgd_trial(case, build_sgd):
    what, iterations, d = _sgd_what(case), case["iterations"], case["features"]
    dev, g, infeed, outfeed = _queues((case["x"], case["y"]), case["batch"], "ALL")
    with naming(what):
        got = build_sgd(g, infeed, outfeed, iterations, case["lr"], d)
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
    calls = []
    for _ in range(SGD_CALLS):
        with naming(what):
            eng.run()
            calls.append({"losses": np.asarray(outfeed.dequeue(), np.float64).reshape(-1),
                          "w": eng.read_tensor("w").reshape(-1)})
    return calls


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
    (zero at first) kept on the device across calls."""
    for case, calls in zip(cases, outputs):
        what, iterations, batch = _sgd_what(case), case["iterations"], case["batch"]
        x, y = np.asarray(case["x"]), np.asarray(case["y"])
        if not isinstance(calls, list) or len(calls) != SGD_CALLS:
            raise Wrong(f"{what}: the trial gave no result for {SGD_CALLS} Engine.run calls")
        w_ref = np.zeros(case["features"])
        for c, call in enumerate(calls):
            part = slice(c * iterations * batch, (c + 1) * iterations * batch)
            losses, w_ref = sgd_reference(x[part], y[part], iterations, batch, case["lr"],
                                          w_ref)
            got = output_array(output_field(call, "losses", what), None, what)
            if got.size == losses.size and np.allclose(got, losses * batch, rtol=1e-3):
                raise Wrong(f"{what}: your losses are {batch} x too big: outfeed the MEAN "
                            "squared error of the batch")
            first_mismatch(losses, got, f"{what}: the losses outfed by call {c + 1}",
                           rtol=1e-3, atol=1e-5)
            w = output_array(output_field(call, "w", what), w_ref.shape, f"{what}: w")
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


def _collatz_cases(rng) -> list[dict]:
    """Start values loaded one after another into the same engine (program 0 must reset
    the counter): n = 1 first (the condition runs before the body: no step), one halving,
    27 (111 steps), small odd and even starts; then random starts in a second engine."""
    return [{"starts": starts, "_steps": [collatz_steps(s) for s in starts]}
            for starts in ([1, 2, 27, 6, 7], [int(s) for s in rng.integers(3, 10_000, 3)])]


def _collatz_trial(case, build_collatz):
    what = "build_collatz(graph, start, steps_out)"
    dev = device(1)
    g = ipu.Graph(dev.target)
    start = g.add_host_to_device_fifo("start", ipu.UNSIGNED_INT, 1)
    steps_out = g.add_device_to_host_fifo("steps", ipu.UNSIGNED_INT, 1)
    with naming(what):
        progs = build_collatz(g, start, steps_out)
    if not (isinstance(progs, list | tuple) and len(progs) == 3
            and all(isinstance(p, ipu.Program) for p in progs)):
        raise Wrong(f"{what}: return the list of three programs [init, run, read], got "
                    f"{progs!r}"[:400])
    try:
        eng = ipu.Engine(g, list(progs), {"debug.maxEmulatedSteps": COLLATZ_MAX_STEPS})
    except ipu.IpuError as exc:
        raise Wrong(library_error(f"{what}: your programs do not compile", exc)) from None
    host_in, host_out = np.zeros(1, np.uint32), np.zeros(1, np.uint32)
    with naming(what):
        eng.load(dev)
        eng.connect_stream("start", host_in)
        eng.connect_stream("steps", host_out)
    found = []
    for n in case["starts"]:
        host_in[0] = n
        with naming(f"start n = {n}"):
            for program in (0, 1, 2):
                eng.run(program)
            first = int(host_out[0])
            eng.run(1)
            eng.run(2)
        found.append([first, int(host_out[0])])
    return found


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
    count to the stream ``steps_out``."""
    for case, found in zip(cases, outputs):
        starts, wants = case["starts"], case["_steps"]
        if not isinstance(found, list) or len(found) != len(starts):
            raise Wrong(f"start values {starts}: the trial gave no count for each")
        before = None
        for k, (n, want, pair) in enumerate(zip(starts, wants, found)):
            what = f"start n = {n}" + (f" (loaded after {starts[:k]})" if k else "")
            if not isinstance(pair, list) or len(pair) != 2:
                raise Wrong(f"{what}: the trial gave no count")
            first, again = (as_count(v, what) for v in pair)
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
