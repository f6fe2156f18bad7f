"""Widgets whose every name a program chooses is an HTML or JavaScript payload.

tests/test_browser.py opens them (``save_html`` pages, and a notebook exported with
``jupyter nbconvert --to html``), plays, scrubs and hovers them, and asserts that no payload
runs: each one that ran would set ``window.__ipukit_pwned`` (or open a dialog). The names:
tensors, compute sets, a vertex class, a data stream and a remote buffer (all in the
Trace's step names; the remote buffer in the MemoryMap's Streaming Memory line too), memory
categories, span kinds and labels, and the panel titles of a run's timeline.
"""

import numpy as np

import ipukit as ipu
from ipukit.timeline import Span
from ipukit.widgets import BSPView, MemoryMap, PipelineTimeline
from ipukit.widgets.pipeline_timeline import from_run

FLAG = "__ipukit_pwned"
#: The cheapest tricks first: an element whose handler runs when it is parsed as HTML, a
#: script tag, attribute break-outs (both quotes), javascript: URLs, SVG onload, a script
#: end tag with a comment opener (to escape a JSON <script> block), a template literal; then
#: odd text: mathtext, a lone surrogate, control characters, 100,000 characters.
PAYLOADS = [
    f'<img src=x onerror="window.{FLAG}=1;alert(1)">',
    f"<script>window.{FLAG}=2;alert(2)</script>",
    f'"><img src=x onerror=window.{FLAG}=3>',
    f"'><svg onload=window.{FLAG}=4>",
    f"javascript:window.{FLAG}=5;alert(5)",
    f"<svg><script>window.{FLAG}=6</script></svg>",
    f"</script><script>window.{FLAG}=7</script><!--",
    f'<a href="javascript:window.{FLAG}=8" id="x">link</a>',
    f'<iframe srcdoc="<script>parent.{FLAG}=9</script>"></iframe>',
    f"<details open ontoggle=window.{FLAG}=10>",
    f"${{window.{FLAG}=11}}`<b>",
    "$\\frac{a$ and $x^$ \ud800 tab\tnul\x00 end",
    f"<img src=x onerror=window.{FLAG}=12>" + "x" * 100_000,
]


def payload(i: int) -> str:
    return PAYLOADS[i % len(PAYLOADS)]


def trace():
    """A run on 2 IPUs of 4 tiles whose tensors, compute sets, vertex class and data stream
    are named by the payloads, and whose memory categories are too."""

    class SumVertex(ipu.Vertex):
        x = ipu.Input(ipu.Vector(ipu.FLOAT))
        out = ipu.Output(ipu.FLOAT)

        def compute(self):
            self.out[...] = self.x.sum(axis=-1)

    evil = type(payload(2), (SumVertex,), {})  # a vertex class named by a payload
    dev = ipu.IPUModel(num_ipus=2, tiles_per_ipu=4).create_device()
    g = ipu.Graph(dev.target)
    x = g.add_variable(ipu.FLOAT, [8, 4], payload(0))
    y = g.add_variable(ipu.FLOAT, [8], payload(1))
    z = g.add_variable(ipu.FLOAT, [8], payload(3))
    progs = []
    for c in range(2):
        cs = g.add_compute_set(payload(4 + c))
        for i in range(8):
            g.set_tile_mapping(x[i], i)
            g.set_tile_mapping(y[i], i)
            g.set_tile_mapping(z[i], 7 - i)
            v = g.add_vertex(cs, evil if i % 2 else SumVertex, {"x": x[i], "out": y[i]})
            g.set_tile_mapping(v, (i + c) % 8)
        progs.append(ipu.Execute(cs))
    stream = g.add_host_to_device_fifo(payload(6), ipu.FLOAT, 32)
    buf = g.add_remote_buffer(payload(8), ipu.FLOAT, 8)  # Streaming Memory, named too
    progs = [ipu.Copy(stream, x), *progs, ipu.Copy(y, z),  # a stream copy, an IPU-Link copy
             ipu.Copy(z, buf)]  # and a copy to the remote buffer
    eng = ipu.Engine(g, ipu.Sequence(*progs))
    eng.load(dev)
    eng.connect_stream(payload(6), np.arange(32, dtype=np.float32))
    eng.run()
    cats = eng.trace.memory.categories  # categories named by payloads (as an attacker would)
    renamed = {f"{payload(7 + j)} {k}": v for j, (k, v) in enumerate(cats.items())}
    cats.clear()
    cats.update(renamed)
    return eng.trace


def spans(unit: float = 150.0):
    """A run's timeline whose span kinds and labels are payloads (times in ``unit``
    cycles: about as long as :func:`trace`'s run, so the two panels share a scale)."""
    rows = [(0, "F", 0, 10, 0, 0, payload(0)), (1, "F", 10, 10, 1, 0, payload(1)),
            (1, "B", 20, 20, 1, 0, payload(2)), (0, "B", 40, 20, 0, 0, payload(3)),
            (0, "compute", 60, 15, -1, -1, payload(4)), (1, payload(5), 60, 15, -1, -1,
                                                         payload(6)),
            (0, "link", 10, 2, -1, -1, payload(7)), (1, payload(8), 75, 5, -1, -1,
                                                     payload(12))]
    return [Span(q, kind, unit * t, unit * d, stage=st, microbatch=mb, label=text)
            for q, kind, t, d, st, mb, text in rows]


def widgets() -> dict:
    """One of each widget (the timeline twice: a run's spans, and an emulated trace's
    compared with them), every name a payload."""
    t = trace()
    return {"bsp": BSPView(t),
            "timeline": PipelineTimeline(from_run(spans(), payload(9)),
                                         compare=from_run(t.timeline(), payload(10))),
            "memory": MemoryMap(t)}
