"""What every ipukit widget shares: an ``anywidget.AnyWidget`` whose front end is the ES
module ``static/ipukit_widgets.js`` (shipped as is: no build step, nothing fetched).

Python sends the run's data once (``_payload``: a ``meta`` dict and binary ``arrays``, each
in the smallest integer type that holds it); the browser draws it on a canvas with
requestAnimationFrame and plays, pauses, scrubs and answers hover on its own. ``frame``,
``playing``, ``speed`` and ``selected`` (the clicked tile or op) sync both ways.

Beyond the kernel: :meth:`Widget.save_html` writes one self-contained page that plays
offline, and the widget's cell output carries the same page fragment as ``text/html`` (what
``jupyter nbconvert --to html`` shows, playing, where no widget state is saved) and a
matplotlib PNG (``image/png``, for nbval, PDF and GitHub). A subclass implements
``num_frames()``, ``payload()`` (the data for the browser), ``draw(k)`` (the matplotlib
figure ``self.fig`` for frame ``k``), ``caption(k)`` and ``static_frame()``.

Pages are safe to open: every name a program chooses (tensor, compute set, stream, span
label, stage title...) reaches the page as text (the front end sets ``textContent`` and
attributes, never HTML), and reaches the page, the comm and matplotlib only as
:func:`ipukit.report.display_name` makes it: unencodable characters replaced, at most
``TIP_CHARS`` characters (``NAME_CHARS`` where a caption or a figure shows it).
"""

from __future__ import annotations

import base64
import html
import io
import json
import uuid
import warnings
from pathlib import Path

import numpy as np

try:
    import anywidget
    import matplotlib  # noqa: F401
    import traitlets
except ImportError as e:  # the "lab" extra
    raise ImportError(f"ipukit.widgets needs anywidget and matplotlib ({e}); install them "
                      "with: pip install 'ipukit[lab]'") from e
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from ..report import display_name

STATIC = Path(__file__).parent / "static"
JS = STATIC / "ipukit_widgets.js"
CSS = STATIC / "ipukit_widgets.css"
#: A name is sent to the browser with at most this many characters (its tooltip shows them;
#: captions and headers show ``NAME_CHARS``).
TIP_CHARS = 1000
#: Seconds the whole run takes to play at speed 1.
PLAY_SECONDS = 10.0

#: An idle tile, the slowest tile and IPU-Link traffic.
IDLE = "#E4E4E4"
SLOWEST = "#D62728"
LINK = "#0072B2"
#: One colour per micro-batch (matplotlib's tab10 without its grey), repeated after 9.
MB_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
              "#bcbd22", "#17becf"]


def mb_colour(microbatch: int) -> str:
    return MB_COLOURS[microbatch % len(MB_COLOURS)]


def tint(colour, amount: float) -> tuple:
    """``colour`` mixed with white: amount 0 is white, 1 the colour itself."""
    rgb = np.asarray(to_rgb(colour))
    return tuple(1 - amount * (1 - rgb))


def new_figure(width: float, height: float, dpi: int = 90) -> Figure:
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():  # a name's character the font lacks: a box, no warning
        warnings.filterwarnings("ignore", "Glyph .* missing from font", UserWarning)
        fig.savefig(buf, format="png", dpi=fig.dpi, facecolor="white")
    return buf.getvalue()


def esc(text, limit: int | None = None) -> str:
    """``text`` as HTML text: made by :func:`display_name` (at most ``limit`` characters,
    if given), then escaped."""
    text = str(text)
    return html.escape(display_name(text, limit or max(len(text), 1)))


def clean(value):
    """``value`` (the browser's ``meta``) with every string, key or value, made by
    :func:`display_name` (at most ``TIP_CHARS`` characters): what the comm, JSON and the
    page can carry."""
    if isinstance(value, str):
        return display_name(value, TIP_CHARS)
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def script_json(value) -> str:
    """``value`` as JSON that can sit inside a ``<script>`` element: no ``<``, ``>`` or
    ``&`` (so no ``</script>`` or ``<!--``), each written as a ``\\u`` escape."""
    text = json.dumps(value, separators=(",", ":"))
    for c in "<>&":
        text = text.replace(c, f"\\u{ord(c):04x}")
    return text


_INTS = [("u1", np.uint8), ("u2", np.uint16), ("u4", np.uint32), ("i1", np.int8),
         ("i2", np.int16), ("i4", np.int32)]


def pack(values) -> dict:
    """A flat array for the browser, in the smallest type that holds it exactly."""
    a = np.asarray(values).reshape(-1)
    if a.dtype.kind in "iub":
        lo, hi = (int(a.min()), int(a.max())) if a.size else (0, 0)
        for code, dt in _INTS:
            info = np.iinfo(dt)
            if info.min <= lo and hi <= info.max:
                return {"dtype": code, "data": a.astype(dt).astype(f"<{code}").tobytes()}
    return {"dtype": "f8", "data": a.astype("<f8").tobytes()}


def unpack(a: dict) -> np.ndarray:
    """What the browser reads from :func:`pack` (for tests)."""
    return np.frombuffer(a["data"], np.dtype(f"<{a['dtype']}"))


def _jsonable(payload: dict) -> dict:
    arrays = {k: {"dtype": v["dtype"], "data": base64.b64encode(v["data"]).decode("ascii")}
              for k, v in payload["arrays"].items()}
    return {"meta": payload["meta"], "arrays": arrays}


class Widget(anywidget.AnyWidget):
    """A widget whose browser side plays the run; ``frame`` is the frame shown."""

    _esm = JS
    _css = CSS
    _payload = traitlets.Dict().tag(sync=True)
    frame = traitlets.Int(0).tag(sync=True)
    playing = traitlets.Bool(False).tag(sync=True)
    speed = traitlets.Float(1.0).tag(sync=True)
    duration = traitlets.Float(PLAY_SECONDS).tag(sync=True)
    selected = traitlets.Dict().tag(sync=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.fig = None
        self._payload = self.clean_payload()

    @traitlets.validate("frame")
    def _valid_frame(self, proposal):
        return self._check_frame(proposal["value"])

    def _check_frame(self, k: int) -> int:
        n = self.num_frames()
        if not 0 <= k < n:
            raise ValueError(f"frame {k}: {type(self).__name__} has frames 0..{n - 1}")
        return k

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.num_frames()} frames)"

    # -- to implement --------------------------------------------------------------------
    def num_frames(self) -> int:
        raise NotImplementedError

    def payload(self) -> dict:
        raise NotImplementedError

    def draw(self, k: int) -> None:
        raise NotImplementedError

    def caption(self, k: int | None = None) -> str:
        raise NotImplementedError

    def static_frame(self) -> int:
        return self.frame

    # -- shared ----------------------------------------------------------------------------
    def clean_payload(self) -> dict:
        """:meth:`payload`, every string in its ``meta`` made safe to send (:func:`clean`)."""
        payload = self.payload()
        return {"meta": clean(payload["meta"]), "arrays": payload["arrays"]}

    @property
    def value(self) -> int:
        """The frame shown (``frame``)."""
        return self.frame

    @value.setter
    def value(self, k: int) -> None:
        self.frame = k

    def render(self, k: int | None = None) -> bytes:
        """Frame ``k`` (default: the one shown) as a matplotlib PNG."""
        self.draw(self._check_frame(self.frame if k is None else k))
        return png(self.fig)

    def to_png(self, max_frames: int = 40, ms_per_frame: int = 400) -> bytes:
        """The animation as one animated PNG (APNG: every browser plays it, no kernel)."""
        from PIL import Image

        n = self.num_frames()
        picks = np.unique(np.linspace(0, n - 1, min(n, max_frames)).round().astype(int))
        frames = [Image.open(io.BytesIO(self.render(int(k)))).convert("RGB") for k in picks]
        buf = io.BytesIO()
        frames[0].save(buf, format="PNG", save_all=True, append_images=frames[1:],
                       duration=ms_per_frame, loop=0)
        return buf.getvalue()

    def static(self):
        """An ``IPython.display.Image`` of the static picture (an image/png output)."""
        from IPython.display import Image

        return Image(data=self.render(self.static_frame()), format="png")

    def _state(self) -> dict:
        payload = _jsonable(self._payload)
        payload["meta"] = dict(payload["meta"], controls=None)  # no kernel to ask
        return {"_payload": payload, "frame": int(self.frame), "playing": False,
                "speed": float(self.speed), "duration": float(self.duration),
                "selected": {}, "settings": {}, "error": ""}

    def to_html(self, picture: bytes | None = None) -> str:
        """One self-contained HTML fragment that plays this widget with no kernel.

        ``picture`` (PNG bytes) is shown where scripts do not run (GitHub, a sanitiser).
        """
        uid = f"ipukit-{uuid.uuid4().hex[:12]}"
        state = script_json(self._state())
        js = JS.read_text(encoding="utf-8").replace("</script", "<\\/script")
        img = ""
        if picture is not None:
            img = (f'<img alt="{esc(repr(self))}" style="max-width:100%" '
                   f'src="data:image/png;base64,{base64.b64encode(picture).decode("ascii")}"/>')
        return (f'<style>{CSS.read_text(encoding="utf-8")}</style>'
                f'<div class="ipukit-standalone" id="{uid}">{img}</div>'
                f'<script type="application/json" id="{uid}-state">{state}</script>'
                f'<script type="module">\n{js}\nstandalone(document.getElementById("{uid}"), '
                f'JSON.parse(document.getElementById("{uid}-state").textContent));\n</script>')

    def save_html(self, path) -> Path:
        """Write one self-contained page that plays this widget offline; returns its path."""
        path = Path(path)
        title = esc(repr(self))
        path.write_text(f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
                        f"<title>{title}</title></head><body>{self.to_html()}</body></html>\n",
                        encoding="utf-8")
        return path

    def _repr_mimebundle_(self, **kwargs):
        out = super()._repr_mimebundle_(**kwargs)
        data, metadata = out if isinstance(out, tuple) else (out, {})
        picture = self.render(self.static_frame())
        data["image/png"] = base64.b64encode(picture).decode("ascii")
        data["text/html"] = self.to_html(picture)
        return data, metadata
