// ipukit widgets' front end: BSPView, PipelineTimeline and MemoryMap (an anywidget ES
// module, shipped as is: no build step, nothing fetched). Python sends the run's data once
// (`_payload`: `meta` plus binary `arrays`); this file draws it on a canvas with
// requestAnimationFrame and plays, pauses, scrubs, zooms and answers hover without the
// kernel. The same file runs in a saved page (`save_html`) with a local stand-in model.
//
// Safe to open: every name a program chose (compute sets, tensors, streams, span labels,
// panel titles, categories) is put on the page as text (text nodes and attributes made by
// `h`, canvas fillText), never parsed as HTML: this file never sets innerHTML. Python sends
// names already cleaned and capped (ipukit.report.display_name); `short` caps what a
// header or caption shows.

const DTYPES = {
  u1: Uint8Array, u2: Uint16Array, u4: Uint32Array, i1: Int8Array, i2: Int16Array,
  i4: Int32Array, f4: Float32Array, f8: Float64Array,
};
const MIN_OP_PX = 2; // an op is never drawn narrower than this (no hairlines)
const NAME_CHARS = 200; // a header or caption shows at most this much of a name
const SPEEDS = [0.25, 0.5, 1, 2, 4];

function bytesOf(data) {
  if (typeof data === "string") { // base64 (a saved page)
    const s = atob(data);
    const out = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out.buffer;
  }
  if (data instanceof ArrayBuffer) return data;
  // a DataView or typed array (the widget comm): copy, so the offset is aligned
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength).slice().buffer;
}

export function decode(payload) {
  const arrays = {};
  for (const [name, a] of Object.entries(payload.arrays || {})) {
    arrays[name] = new DTYPES[a.dtype](bytesOf(a.data));
  }
  return { meta: payload.meta, arrays };
}

// An element: attributes set as values (never parsed), children appended as nodes or text.
function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "style") Object.assign(e.style, v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) e.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) e.append(c);
  return e;
}
const tr = (...cells) => h("tr", {}, ...cells.map((c) => h("td", {}, c)));

// A name as a header or caption shows it: at most n characters, the last an ellipsis.
export function short(name, n = NAME_CHARS) {
  const chars = Array.from(String(name));
  return chars.length <= n ? chars.join("") : `${chars.slice(0, n - 1).join("")}…`;
}

const fmt = (x, digits = 0) => Number(x).toLocaleString("en-US", {
  minimumFractionDigits: digits, maximumFractionDigits: digits });

function rgb(hex) {
  const n = parseInt(hex.slice(1), 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}
function mix(hex, amount) { // the colour mixed with white: 0 is white, 1 the colour
  const [r, g, b] = rgb(hex);
  const f = (c) => Math.round(255 - amount * (255 - c));
  return `rgb(${f(r)},${f(g)},${f(b)})`;
}

// Integer ticks ("nice" steps 1, 2, 5 x 10^k): never a fractional tile number.
export function integerTicks(lo, hi, most = 6) {
  const span = Math.max(hi - lo, 1);
  let step = 1;
  for (let p = 1; ; p *= 10) {
    const s = [p, 2 * p, 5 * p].find((c) => span / c <= most);
    if (s) { step = s; break; }
  }
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) out.push(v);
  return out;
}

// ---- the tile grid (BSPView and MemoryMap): IPUs side by side, tiles row by row -----------
function gridGeometry(meta, x0, y0, w, hgt) {
  const { num_ipus: n, cols, rows, gap } = meta.layout;
  const width = n * cols + (n - 1) * gap;
  const cell = Math.max(1, Math.min(w / width, (hgt - 16) / rows));
  return { x0, y0: y0 + 16, cell, cols, rows, gap, width, n, tpi: meta.layout.tiles_per_ipu };
}
// The picture of frame k at width w, drawn once into an off-screen canvas by paint(ctx)
// and copied onto ctx on every animation frame; returns the (possibly new) layer.
function cachedLayer(layer, ctx, k, w, paint) {
  const r = window.devicePixelRatio || 1;
  if (!layer || layer.k !== k || layer.w !== w) {
    layer = document.createElement("canvas");
    layer.width = ctx.canvas.width;
    layer.height = ctx.canvas.height;
    const lc = layer.getContext("2d");
    lc.setTransform(r, 0, 0, r, 0, 0);
    paint(lc);
    layer.k = k;
    layer.w = w;
  }
  ctx.drawImage(layer, 0, 0, w, ctx.canvas.height / r);
  return layer;
}

// A black outline round the hovered tile.
function outlineTile(ctx, g, hover) {
  if (!(hover && hover.tile >= 0)) return;
  const [x, y] = tileXY(g, hover.tile);
  ctx.strokeStyle = "#000";
  ctx.lineWidth = 1.5;
  ctx.strokeRect(x - 1, y - 1, g.cell + 2, g.cell + 2);
}

function tileXY(g, tile) {
  const q = Math.floor(tile / g.tpi);
  const local = tile % g.tpi;
  return [g.x0 + (q * (g.cols + g.gap) + (local % g.cols)) * g.cell,
    g.y0 + Math.floor(local / g.cols) * g.cell];
}
function tileAt(g, x, y) {
  const cx = Math.floor((x - g.x0) / g.cell);
  const cy = Math.floor((y - g.y0) / g.cell);
  if (cx < 0 || cy < 0 || cy >= g.rows || cx >= g.width) return -1;
  const q = Math.floor(cx / (g.cols + g.gap));
  const col = cx - q * (g.cols + g.gap);
  if (col >= g.cols || q >= g.n) return -1;
  const local = cy * g.cols + col;
  return local < g.tpi ? q * g.tpi + local : -1;
}
function drawIpuFrames(ctx, g) {
  ctx.save();
  ctx.strokeStyle = "#555";
  ctx.lineWidth = 1;
  ctx.fillStyle = "#333";
  ctx.font = "12px sans-serif";
  ctx.textAlign = "center";
  for (let q = 0; q < g.n; q++) {
    const x = g.x0 + q * (g.cols + g.gap) * g.cell;
    ctx.strokeRect(x - 1.5, g.y0 - 1.5, g.cols * g.cell + 3, g.rows * g.cell + 3);
    ctx.fillText(`IPU ${q}  (tiles ${fmt(q * g.tpi)}–${fmt((q + 1) * g.tpi - 1)})`,
      x + g.cols * g.cell / 2, g.y0 - 5);
  }
  ctx.restore();
}

// ---- the player shared by the three widgets ---------------------------------------------
function player(model, el, view) {
  const root = h("div", { class: "ipukit-widget", "data-ipukit-frame": "0",
    "data-ipukit-kind": view.kind });
  const play = h("button", { class: "ipukit-play", type: "button", "aria-label": "Play",
    "aria-pressed": "false", title: "Play / pause (space)" }, "▶");
  const scrub = h("input", { class: "ipukit-scrub", type: "range", min: "0",
    max: String(view.numFrames - 1), step: "1", value: "0", "aria-label": "Frame" });
  const speed = h("select", { class: "ipukit-speed", "aria-label": "Speed" },
    ...SPEEDS.map((s) => h("option", { value: String(s), selected: s === 1 ? "" : null },
      `${s}×`)));
  const readout = h("span", { class: "ipukit-readout" });
  const bar = h("div", { class: "ipukit-bar" }, play, scrub, speed, readout);
  const header = h("div", { class: "ipukit-header" });
  const canvas = h("canvas", { class: "ipukit-canvas", tabindex: "0" });
  const tip = h("div", { class: "ipukit-tooltip", role: "tooltip", hidden: "" });
  const stage = h("div", { class: "ipukit-stage" }, canvas, tip);
  const caption = h("div", { class: "ipukit-caption", "aria-live": "polite" });
  root.append(bar);
  if (view.extraControls) root.append(view.extraControls);
  root.append(header, stage, caption);
  if (view.help) root.append(view.help);
  el.append(root);

  const ctx = canvas.getContext("2d");
  let pos = Math.min(model.get("frame") || 0, view.numFrames - 1);
  let playing = false;
  let last = null;
  let dirty = true;
  let shownFrame = -1;
  let sentFrame = pos;
  let sentAt = 0;
  let width = 0;
  let fpsCount = 0;
  let fpsStart = 0;
  let raf = 0;
  let hover = null;
  let textsDue = true;
  let textsAt = 0;
  // A frame's share of the play time (view.weights: Python's, e.g. BSPView.frame_weights;
  // else 1 each); the whole run still takes `duration` seconds.
  const weights = view.weights || Array(view.numFrames).fill(1);
  let resumable = false; // paused mid-play: Play goes on from there
  const totalWeight = weights.reduce((a, b) => a + b, 0) || 1;
  const perSecond = () => totalWeight / Math.max(model.get("duration") || 10, 0.1);

  function syncFrame(force) {
    const k = Math.floor(pos);
    const now = performance.now();
    if (k !== sentFrame && (force || now - sentAt > 250)) {
      sentFrame = k;
      sentAt = now;
      model.set("frame", k);
      model.save_changes();
    }
  }
  function setPlaying(on) {
    // Play at the end starts again; a view that plays all its frames (MemoryMap's
    // categories) starts from the first unless it was paused mid-play
    if (on && (pos >= view.numFrames - 1 || (view.playAll && !resumable))) pos = 0;
    resumable = !on && playing && pos < view.numFrames - 1;
    playing = on;
    last = null;
    play.textContent = on ? "❚❚" : "▶";
    play.setAttribute("aria-pressed", String(on));
    root.dataset.ipukitPlaying = String(on);
    fpsCount = 0;
    fpsStart = performance.now();
    if (model.get("playing") !== on) {
      model.set("playing", on);
      if (!on) syncFrame(true);
      model.save_changes();
    }
    dirty = true;
  }
  function seek(k) {
    resumable = false;
    pos = Math.max(0, Math.min(view.numFrames - 1, k));
    dirty = true;
    syncFrame(true);
  }
  function resize() {
    const w = Math.max(320, Math.floor(stage.clientWidth || el.clientWidth || 900));
    if (w === width) return;
    width = w;
    const hgt = view.height(w);
    const r = window.devicePixelRatio || 1;
    canvas.width = Math.round(w * r);
    canvas.height = Math.round(hgt * r);
    canvas.style.width = `${w}px`;
    canvas.style.height = `${hgt}px`;
    ctx.setTransform(r, 0, 0, r, 0, 0);
    view.resized && view.resized(w, hgt);
    dirty = true;
  }
  function tick(ts) {
    raf = requestAnimationFrame(tick);
    if (!el.isConnected && shownFrame >= 0) return;
    resize();
    if (playing) {
      if (last !== null) {
        let budget = ((ts - last) / 1000) * perSecond() * (model.get("speed") || 1);
        while (budget > 0 && pos < view.numFrames - 1) { // walk frame by frame, by weight
          const k = Math.floor(pos);
          const step = Math.min(budget / weights[k], k + 1 - pos);
          pos += step;
          budget -= step * weights[k];
        }
      }
      last = ts;
      if (pos >= view.numFrames - 1) {
        pos = view.numFrames - 1;
        setPlaying(false);
      }
      syncFrame(false);
      dirty = true;
    }
    if (!dirty) return;
    dirty = false;
    ctx.clearRect(0, 0, width, canvas.height);
    view.draw(ctx, pos, width, hover);
    const k = Math.floor(pos);
    if (k !== shownFrame) {
      shownFrame = k;
      root.dataset.ipukitFrame = String(k);
      scrub.value = String(k);
      textsDue = true;
    }
    if (textsDue && (!playing || ts - textsAt > 100)) { // words at most 10 times a second
      textsDue = false;
      textsAt = ts;
      readout.textContent = view.readout(k);
      header.replaceChildren(...[view.header(k)].flat(Infinity));
      caption.replaceChildren(...[view.caption(k)].flat(Infinity));
    }
    if (playing) {
      fpsCount += 1;
      const dt = ts - fpsStart;
      if (dt > 1000) {
        root.dataset.ipukitFps = (1000 * fpsCount / dt).toFixed(1);
        fpsCount = 0;
        fpsStart = ts;
      }
    }
  }

  play.addEventListener("click", () => setPlaying(!playing));
  scrub.addEventListener("input", () => { setPlaying(false); seek(Number(scrub.value)); });
  speed.addEventListener("change", () => {
    model.set("speed", Number(speed.value));
    model.save_changes();
  });
  canvas.addEventListener("keydown", (e) => {
    if (e.key === " ") { e.preventDefault(); setPlaying(!playing); }
    if (e.key === "ArrowRight") seek(Math.floor(pos) + 1);
    if (e.key === "ArrowLeft") seek(Math.floor(pos) - 1);
  });
  function local(e) {
    const r = canvas.getBoundingClientRect();
    return [e.clientX - r.left, e.clientY - r.top];
  }
  canvas.addEventListener("mousemove", (e) => {
    const [x, y] = local(e);
    if (view.drag && view.drag(x, y, e)) { dirty = true; return; }
    const item = view.hit(x, y, Math.floor(pos));
    hover = item;
    dirty = true;
    if (!item) { tip.hidden = true; return; }
    tip.replaceChildren(...[view.tooltip(item, Math.floor(pos))].flat(Infinity));
    tip.hidden = false;
    const left = Math.min(x + 14, width - tip.offsetWidth - 4);
    tip.style.left = `${Math.max(0, left)}px`;
    tip.style.top = `${y + 14}px`;
  });
  canvas.addEventListener("mouseleave", () => {
    tip.hidden = true; hover = null; dirty = true;
    view.dragEnd && view.dragEnd();
  });
  canvas.addEventListener("mousedown", (e) => view.dragStart && view.dragStart(...local(e)));
  canvas.addEventListener("mouseup", () => view.dragEnd && view.dragEnd());
  canvas.addEventListener("click", (e) => {
    if (view.wasDragged && view.wasDragged()) return;
    const item = view.hit(...local(e), Math.floor(pos));
    if (!item) return;
    const jump = view.select(item, Math.floor(pos));
    model.set("selected", view.selection(item, Math.floor(pos)));
    model.save_changes();
    if (jump !== undefined && jump !== null) { setPlaying(false); seek(jump); }
  });
  canvas.addEventListener("wheel", (e) => {
    if (!view.zoom) return;
    e.preventDefault();
    view.zoom(local(e)[0], e.deltaY < 0 ? 1.25 : 0.8);
    dirty = true;
  }, { passive: false });
  canvas.addEventListener("dblclick", () => { if (view.zoomReset) { view.zoomReset(); dirty = true; } });

  const onFrame = () => {
    const k = model.get("frame");
    if (k !== Math.floor(pos)) {
      pos = Math.max(0, Math.min(view.numFrames - 1, k));
      resumable = false;
    }
    sentFrame = k;
    dirty = true;
  };
  const onPlaying = () => { if (model.get("playing") !== playing) setPlaying(model.get("playing")); };
  const onSpeed = () => { speed.value = String(model.get("speed")); };
  model.on("change:frame", onFrame);
  model.on("change:playing", onPlaying);
  model.on("change:speed", onSpeed);
  onSpeed();
  const api = { redraw() { dirty = true; }, root };
  view.root = root;
  if (view.showWindow) view.showWindow();
  view.redraw = api.redraw;
  raf = requestAnimationFrame(tick);
  if (model.get("playing")) setPlaying(true);
  return () => {
    cancelAnimationFrame(raf);
    model.off("change:frame", onFrame);
    model.off("change:playing", onPlaying);
    model.off("change:speed", onSpeed);
  };
}

// ---- BSPView --------------------------------------------------------------------------
// A superstep's phases (ipukit.trace.PHASES); "exchange out" only where a compute set
// has outputs on other tiles. KEYS: each phase's cycles in meta.steps.
const PHASES = ["sync", "exchange", "compute", "exchange out"];
const KEYS = ["sync", "exchange", "compute", "exchange_out"];

function bspView(meta, A) {
  const ev = meta.events; // [step, start, run]
  const steps = meta.steps;
  const T = meta.layout.num_ipus * meta.layout.tiles_per_ipu;
  const colours = meta.colours;
  // a copy to or from Streaming Memory is drawn in its own colour (BSPView.phase_colour)
  const phaseColour = (f) => (f.s.kind === "remote" && f.phase === "exchange"
    ? colours.remote : colours[f.phase]);
  const small = T <= 32;
  let g = null;
  let bars = null;
  let strip = null;
  let layer = null;
  const row = (name, s) => A[name].subarray(s * T, (s + 1) * T);
  // the frames, as BSPView.frames: [event, phase index], and each event's first frame
  const frames = [];
  const first = [];
  ev.forEach(([si], e) => {
    first.push(frames.length);
    for (let p = 0; p < 4; p++) if (p < 3 || steps[si].exchange_out > 0) frames.push([e, p]);
  });
  const phasesOf = (e) => (e + 1 < first.length ? first[e + 1] : frames.length) - first[e];
  // an exchange phase's per-tile array: NAME for the exchange in, out_NAME for the out
  const xrow = (name, f) => (f.phase === "exchange out"
    ? row(name === "exchange" ? "exchange_out" : `out_${name}`, f.s.out) : row(name, f.si));

  function frame(k) {
    const [e, p] = frames[k];
    const phase = PHASES[p];
    const [si, start] = ev[e];
    const s = steps[si];
    const cycles = s[KEYS[p]];
    let t0 = start;
    for (let q = 0; q < p; q++) t0 += s[KEYS[q]];
    let busy = null;
    if (phase === "compute") busy = row("compute", si);
    else if (phase === "exchange") busy = row("exchange", si);
    else if (phase === "exchange out") busy = row("exchange_out", s.out);
    let most = 0;
    let slowest = -1;
    if (busy) {
      for (let t = 0; t < T; t++) if (busy[t] > most) { most = busy[t]; slowest = t; }
    }
    if (phase === "sync" || most < cycles) slowest = -1; // the links set the length
    return { e, phase, si, s, cycles, busy, most, slowest, start: t0, end: t0 + cycles };
  }

  const view = {
    kind: "bsp",
    numFrames: frames.length,
    weights: meta.weights, // time proportional to cycles; host syncs, empty phases flash by
    height: (w) => (small ? 430 : 470),
    resized(w, hgt) {
      g = gridGeometry(meta, 10, 8, w * 0.56, hgt - 130);
      bars = { x0: w * 0.62, y0: 30, w: w * 0.36, h: hgt - 190 };
      strip = { x0: 50, y0: hgt - 88, w: w - 70, h: 64 };
    },
    draw(ctx, pos, w, hover) {
      const k = Math.floor(pos);
      const f = frame(k);
      layer = cachedLayer(layer, ctx, k, w, (lc) => this.drawFrame(lc, f));
      outlineTile(ctx, g, hover);
      // the play head moves through the phase in the strip
      const bw = strip.w / ev.length;
      const x = strip.x0 + (f.e + (pos - first[f.e]) / phasesOf(f.e)) * bw;
      ctx.strokeStyle = "#D62728";
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.moveTo(x, strip.y0 - 4);
      ctx.lineTo(x, strip.y0 + strip.h + 4);
      ctx.stroke();
    },
    drawFrame(ctx, f) {
      const base = phaseColour(f);
      if (!small) { // one pixel per tile, scaled up: fast for thousands of tiles
        const img = new ImageData(g.width, g.rows);
        const [br, bg, bb] = rgb(base);
        const idle = rgb("#E4E4E4");
        for (let t = 0; t < T; t++) {
          const q = Math.floor(t / g.tpi);
          const local = t % g.tpi;
          const i = 4 * ((Math.floor(local / g.cols)) * g.width + q * (g.cols + g.gap) + (local % g.cols));
          let c = idle;
          if (f.phase === "sync") c = [br, bg, bb];
          else if (f.busy[t] > 0) {
            const a = 0.25 + 0.75 * f.busy[t] / Math.max(f.most, 1);
            c = [255 - a * (255 - br), 255 - a * (255 - bg), 255 - a * (255 - bb)];
          }
          img.data[i] = c[0]; img.data[i + 1] = c[1]; img.data[i + 2] = c[2]; img.data[i + 3] = 255;
        }
        const off = document.createElement("canvas");
        off.width = g.width;
        off.height = g.rows;
        off.getContext("2d").putImageData(img, 0, 0);
        ctx.imageSmoothingEnabled = false;
        ctx.drawImage(off, g.x0, g.y0, g.width * g.cell, g.rows * g.cell);
      }
      for (let t = 0; small && t < T; t++) {
        let c = "#E4E4E4";
        if (f.phase === "sync") c = base;
        else if (f.busy[t] > 0) c = mix(base, 0.25 + 0.75 * f.busy[t] / Math.max(f.most, 1));
        const [x, y] = tileXY(g, t);
        ctx.fillStyle = c;
        const pad = g.cell >= 6 ? 1 : 0;
        ctx.fillRect(x + pad, y + pad, g.cell - 2 * pad, g.cell - 2 * pad);
        if (small) {
          ctx.fillStyle = "#1a1a1a";
          ctx.font = `${g.cell > 60 ? 12 : 10}px sans-serif`;
          ctx.textAlign = "center";
          const lines = [`T${t}`];
          if (f.phase.startsWith("exchange")) {
            const i = xrow("bytes_in", f)[t];
            const o = xrow("bytes_out", f)[t];
            if (i || o) lines.push(`↓${fmt(i)} B`, `↑${fmt(o)} B`);
          } else if (f.phase === "compute" && f.busy[t]) lines.push(`${fmt(f.busy[t])} cyc`);
          lines.forEach((l, j) => ctx.fillText(l, x + g.cell / 2, y + 14 + 13 * j));
        }
      }
      if (small && f.phase.startsWith("exchange") && A.transfers) this.arrows(ctx, f);
      if (f.slowest >= 0) {
        const [x, y] = tileXY(g, f.slowest);
        ctx.strokeStyle = "#D62728";
        ctx.lineWidth = 2.5;
        const s = Math.max(g.cell, 5);
        ctx.strokeRect(x + g.cell / 2 - s / 2, y + g.cell / 2 - s / 2, s, s);
      }
      drawIpuFrames(ctx, g);
      ctx.fillStyle = "#0072B2";
      ctx.font = "12px sans-serif";
      ctx.textAlign = "left";
      const inter = f.phase === "exchange out" ? f.s.inter_out
        : f.phase === "exchange" ? f.s.inter_ipu_bytes : 0;
      if (inter) {
        ctx.fillText(`${fmt(inter)} bytes cross IPUs over IPU-Links`,
          g.x0, g.y0 + g.rows * g.cell + 18);
      } else if (f.phase === "exchange" && f.s.host_bytes) {
        ctx.fillText(`${fmt(f.s.host_bytes)} bytes over the host link (PCIe)`,
          g.x0, g.y0 + g.rows * g.cell + 18);
      } else if (f.phase === "exchange" && f.s.remote_bytes) {
        ctx.fillText(`${fmt(f.s.remote_bytes)} bytes to or from Streaming Memory`,
          g.x0, g.y0 + g.rows * g.cell + 18);
      }
      this.drawBars(ctx, f);
      this.drawStrip(ctx, f);
    },
    arrows(ctx, f) {
      const out = f.phase === "exchange out";
      const off = out ? A.out_transfer_offsets : A.transfer_offsets;
      const rows = out ? A.out_transfers : A.transfers;
      const i0 = out ? f.s.out : f.si;
      const lo = off[i0];
      const hi = off[i0 + 1];
      let most = 1;
      for (let i = lo; i < hi; i++) most = Math.max(most, rows[3 * i + 2]);
      for (let i = lo; i < Math.min(hi, lo + 40); i++) {
        const [src, dst, b] = [rows[3 * i], rows[3 * i + 1], rows[3 * i + 2]];
        const [x1, y1] = tileXY(g, src);
        const [x2, y2] = tileXY(g, dst);
        const cross = Math.floor(src / g.tpi) !== Math.floor(dst / g.tpi);
        ctx.strokeStyle = cross ? "rgba(0,114,178,0.75)" : "rgba(122,74,0,0.7)";
        ctx.lineWidth = 1 + 3 * b / most;
        const [ax, ay, bx, by] = [x1 + g.cell / 2, y1 + g.cell * 0.75, x2 + g.cell / 2,
          y2 + g.cell * 0.75];
        const mx = (ax + bx) / 2 - (by - ay) * 0.2;
        const my = (ay + by) / 2 + (bx - ax) * 0.2;
        ctx.beginPath();
        ctx.moveTo(ax, ay);
        ctx.quadraticCurveTo(mx, my, bx, by);
        ctx.stroke();
        const ang = Math.atan2(by - my, bx - mx);
        ctx.beginPath();
        ctx.moveTo(bx, by);
        ctx.lineTo(bx - 9 * Math.cos(ang - 0.4), by - 9 * Math.sin(ang - 0.4));
        ctx.lineTo(bx - 9 * Math.cos(ang + 0.4), by - 9 * Math.sin(ang + 0.4));
        ctx.closePath();
        ctx.fillStyle = ctx.strokeStyle;
        ctx.fill();
      }
    },
    drawBars(ctx, f) {
      const b = bars;
      const top = Math.max(f.cycles, 1) * 1.3;
      const y = (v) => b.y0 + b.h - (v / top) * b.h;
      const x = (t) => b.x0 + (t / T) * b.w;
      const bw = Math.max(b.w / T, 0.5);
      const per = Math.max(1, Math.floor(T / b.w)); // tiles per bar: the busiest one shows
      ctx.fillStyle = "#E4E4E4";
      ctx.fillRect(b.x0, y(f.cycles), b.w, b.y0 + b.h - y(f.cycles));
      ctx.fillStyle = phaseColour(f);
      for (let t = 0; t < T; t += per) {
        let busy = 0;
        for (let u = t; u < Math.min(T, t + per); u++) {
          busy = Math.max(busy, f.phase === "sync" ? f.cycles : f.busy[u]);
        }
        ctx.fillRect(x(t), y(busy), bw * per, b.y0 + b.h - y(busy));
      }
      ctx.strokeStyle = "#D62728";
      ctx.setLineDash([5, 4]);
      ctx.beginPath();
      ctx.moveTo(b.x0, y(f.cycles));
      ctx.lineTo(b.x0 + b.w, y(f.cycles));
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.strokeStyle = "#333";
      ctx.lineWidth = 1;
      ctx.strokeRect(b.x0, b.y0, b.w, b.h);
      ctx.fillStyle = "#333";
      ctx.font = "11px sans-serif";
      ctx.textAlign = "center";
      for (const t of integerTicks(0, T - 1, 6)) {
        ctx.fillText(String(t), x(t) + bw / 2, b.y0 + b.h + 13);
      }
      ctx.fillText("tile", b.x0 + b.w / 2, b.y0 + b.h + 27);
      ctx.textAlign = "left";
      ctx.fillText(`cycles in this phase (dashed: the phase's ${fmt(f.cycles)}; grey: idle)`,
        b.x0, b.y0 - 6);
    },
    drawStrip(ctx, f) {
      const s = strip;
      const n = ev.length;
      const device = ev.map(([si]) => steps[si]).filter((st) => st.kind !== "host");
      const tallest = Math.max(1, ...(device.length ? device : ev.map(([si]) => steps[si]))
        .map((st) => st.sync + st.exchange + st.compute + st.exchange_out));
      const top = tallest * 1.25;
      const bw = s.w / n;
      for (let e = 0; e < n; e++) {
        const st = steps[ev[e][0]];
        let acc = 0;
        for (let p = 0; p < 4; p++) {
          const v = st[KEYS[p]];
          const y0 = s.y0 + s.h - (Math.min(acc, top) / top) * s.h;
          const y1 = s.y0 + s.h - (Math.min(acc + v, top) / top) * s.h;
          ctx.fillStyle = p === 1 && st.kind === "remote" ? colours.remote : colours[PHASES[p]];
          ctx.fillRect(s.x0 + e * bw + (bw > 4 ? 1 : 0), y1, Math.max(bw - (bw > 4 ? 2 : 0), 0.5),
            y0 - y1);
          acc += v;
        }
      }
      ctx.strokeStyle = "#000";
      ctx.lineWidth = 2;
      ctx.strokeRect(s.x0 + f.e * bw, s.y0, Math.max(bw, 2), s.h);
      ctx.fillStyle = "#333";
      ctx.font = "11px sans-serif";
      ctx.textAlign = "left";
      const left = this.drawStripKey(ctx, s);
      const title = ["executed supersteps (click one to jump; host syncs clipped)",
        "supersteps (click to jump)"].find((t) => s.x0 + ctx.measureText(t).width + 12 < left);
      ctx.fillStyle = "#333";
      ctx.fillText(title || "", s.x0, s.y0 - 6);
      ctx.textAlign = "center";
      for (const e of integerTicks(0, n - 1, 10)) ctx.fillText(String(e + 1), s.x0 + (e + 0.5) * bw, s.y0 + s.h + 14);
    },
    // the strip's key, right-aligned above it: the phases it shows, as the static
    // BSPView's legend (a phase no step has is left out); returns where the key begins
    drawStripKey(ctx, s) {
      const shown = ev.map(([si]) => steps[si]);
      const items = [["sync", colours.sync], ["exchange", colours.exchange],
        ["compute", colours.compute]];
      if (shown.some((st) => st.exchange_out > 0)) {
        items.push(["exchange out", colours["exchange out"]]);
      }
      if (shown.some((st) => st.kind === "remote")) {
        items.push(["Streaming Memory", colours.remote]);
      }
      ctx.textAlign = "left";
      let x = s.x0 + s.w;
      for (const [name, colour] of items.reverse()) {
        x -= ctx.measureText(name).width;
        ctx.fillStyle = "#333";
        ctx.fillText(name, x, s.y0 - 6);
        x -= 14;
        ctx.fillStyle = colour;
        ctx.fillRect(x, s.y0 - 15, 10, 10);
        x -= 12;
      }
      return x;
    },
    hit(x, y, k) {
      if (x >= strip.x0 && x <= strip.x0 + strip.w && y >= strip.y0 && y <= strip.y0 + strip.h) {
        const e = Math.floor(((x - strip.x0) / strip.w) * ev.length);
        return { event: Math.min(e, ev.length - 1), tile: -1 };
      }
      let t = tileAt(g, x, y);
      if (t < 0 && x >= bars.x0 && x < bars.x0 + bars.w && y >= bars.y0 && y <= bars.y0 + bars.h) {
        t = Math.min(T - 1, Math.floor(((x - bars.x0) / bars.w) * T));
      }
      return t >= 0 ? { tile: t } : null;
    },
    tooltip(item, k) {
      if (item.tile < 0) {
        const [si, start] = ev[item.event];
        const s = steps[si];
        return [h("b", {}, `superstep ${item.event + 1}: ${s.name}`), ` (${s.kind})`, h("br"),
          `starts at cycle ${fmt(start)}; sync ${fmt(s.sync)}, exchange ${fmt(s.exchange)}, ` +
          `compute ${fmt(s.compute)}` +
          (s.exchange_out ? `, exchange out ${fmt(s.exchange_out)}` : "") + " cycles"];
      }
      const f = frame(k);
      const t = item.tile;
      const xf = f.phase === "exchange out" ? f : { phase: "exchange", si: f.si };
      const i = xrow("bytes_in", xf)[t];
      const o = xrow("bytes_out", xf)[t];
      const c = row("compute", f.si)[t];
      const x = xrow("exchange", xf)[t];
      const v = row("vertices", f.si)[t];
      const mem = meta.categories.map((name, j) => tr(name, `${fmt(A.memory[j * T + t])} B`));
      const who = f.slowest === t ? " — the slowest tile: everyone waits for it" : "";
      return [h("b", {}, `tile ${t}`), ` (IPU ${Math.floor(t / meta.layout.tiles_per_ipu)})${who}`,
        h("br"), `superstep ${f.e + 1}: ${f.s.name}, ${f.phase} phase`, h("br"),
        `bytes in ${fmt(i)} · bytes out ${fmt(o)} · exchange ${fmt(x)} cycles`, h("br"),
        `compute ${fmt(c)} cycles · ${fmt(v)} vertices (of ${fmt(f.s.vertices)} in this superstep)`,
        h("table", { class: "ipukit-mem" },
          h("tr", {}, h("th", { colspan: "2" }, "memory by category")), mem)];
    },
    select(item, k) {
      if (item.tile >= 0) return null;
      const p = Math.min(frames[k][1], phasesOf(item.event) - 1); // the same phase there
      return first[item.event] + p;
    },
    selection(item, k) {
      const f = frame(k);
      if (item.tile < 0) return { kind: "superstep", event: item.event, step: ev[item.event][0] };
      const t = item.tile;
      const xf = f.phase === "exchange out" ? f : { phase: "exchange", si: f.si };
      return { kind: "tile", tile: t, ipu: Math.floor(t / meta.layout.tiles_per_ipu),
        event: f.e, step: f.si, phase: f.phase, bytes_in: xrow("bytes_in", xf)[t],
        bytes_out: xrow("bytes_out", xf)[t], compute_cycles: row("compute", f.si)[t],
        exchange_cycles: xrow("exchange", xf)[t], vertices: row("vertices", f.si)[t] };
    },
    readout: (k) => `phase ${k + 1} / ${frames.length}`,
    header(k) {
      const f = frame(k);
      const width = fmt(meta.total).length;
      return [h("span", { class: "ipukit-title" },
        `Superstep ${f.e + 1}/${ev.length}: ${short(f.s.name)}`), " ",
      h("span", { style: { color: phaseColour(f) } }, h("b", {}, (
        f.s.kind === "remote" && f.phase === "exchange" ? "Streaming Memory"
          : f.phase).toUpperCase()),
        ` phase · ${fmt(f.cycles)} cycles`),
      h("span", { class: "ipukit-counter" },
        `cycle ${fmt(f.end).padStart(width, "\u2007")} / ${fmt(meta.total)} · ` +
        `${fmt(f.end / meta.clock_hz * 1e6, 2)} µs`)];
    },
    caption(k) {
      const f = frame(k);
      const s = f.s;
      if (f.phase === "sync") {
        return s.kind === "host" ? "The host synchronises with the device (one Engine.run call)."
          : `All ${fmt(T)} tiles wait at the barrier until every tile is ready.`;
      }
      let busyTiles = 0;
      let idle = 0;
      for (let t = 0; t < T; t++) { if (f.busy[t] > 0) busyTiles++; idle += f.cycles - f.busy[t]; }
      if (!busyTiles) return `No tile has anything to ${f.phase === "compute" ? "compute" : "send"}.`;
      const verb = f.phase === "compute" ? "compute" : "send or receive";
      let out = `${fmt(busyTiles)} of ${fmt(T)} tiles ${verb}; `;
      out += f.cycles > f.most
        ? `the tiles are done after ${fmt(f.most)} cycles and the links need ${fmt(f.cycles - f.most)} more: `
        : `tile ${f.slowest} is the slowest (${fmt(f.most)} cycles) and the others wait for it: `;
      out += `${Math.round(100 * idle / Math.max(f.cycles * T, 1))}% of tile time is idle.`;
      if (f.phase === "exchange out") {
        out += " The results vertices wrote for tensors on other tiles go there after the " +
          "compute phase.";
      }
      return out;
    },
  };
  return view;
}

// ---- PipelineTimeline ---------------------------------------------------------------------
const MB = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
  "#bcbd22", "#17becf"];
const IPU_COLOURS = ["#222222", "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00",
  "#56B4E9", "#9E9E00"];
// IPU j of n's stash line: 8 distinct colours, a dark-to-light ramp for more (as Python's)
const ipuColour = (j, n) => (n <= 8 ? IPU_COLOURS[j] : magma(0.9 - 0.8 * j / (n - 1)));
// A pipeline op's box: its micro-batch's colour mixed with white, and a pattern (as
// ipukit.report.OP_STYLE): F light, B full, W mid and striped, R light and dotted.
const OP_STYLE = { F: [0.45, ""], B: [1, ""], W: [0.7, "stripes"], R: [0.45, "dots"] };
const OP_NAMES = { F: "F: forward", B: "B: backward", W: "W: weight gradient",
  R: "R: recomputation" };
const OP_WHAT = { F: "forward", B: "backward", W: "weight gradient (split off the backward)",
  R: "recomputation of the forward" };
const SPLIT_B = "backward for the input gradient (its W follows)";
// Chunk c of n's band: light grey for chunk 0, dark for the last (ipukit.report.chunk_colour).
const chunkColour = (c, n) => {
  const v = Math.round(255 * (0.75 - 0.65 * c / Math.max(n - 1, 1)));
  return `rgb(${v},${v},${v})`;
};
// A stash count (to 2 decimals: a chunk's micro-batch counts 1/v) or bytes.
const amount = (x) => Number(x).toLocaleString("en-US", { maximumFractionDigits: 2 });

// White stripes (W) or dots (R) over the box [x, y, w, hh] (g clipped to it).
function pattern(g, style, x, y, w, hh) {
  g.save();
  g.beginPath();
  g.rect(x, y, w, hh);
  g.clip();
  g.strokeStyle = "rgba(255,255,255,0.9)";
  g.fillStyle = "rgba(255,255,255,0.9)";
  g.lineWidth = 1.5;
  if (style === "stripes") {
    g.beginPath();
    for (let d = -hh; d < w; d += 5) { g.moveTo(x + d, y + hh); g.lineTo(x + d + hh, y); }
    g.stroke();
  } else {
    for (let yy = y + 2; yy < y + hh; yy += 4) {
      for (let xx = x + 2 + ((yy - y) % 8 ? 2 : 0); xx < x + w; xx += 4) g.fillRect(xx, yy, 1.2, 1.2);
    }
  }
  g.restore();
}

// The key above a timeline: the kinds of op shown, the chunk bands and the units' bracket.
function timelineKey(panels) {
  const shown = new Set();
  let chunks = 0;
  let units = false;
  for (const p of panels) {
    for (let i = 0; i < p.num_spans; i++) if (p.mb[i] >= 0) shown.add(p.kinds[p.kind[i]]);
    chunks = Math.max(chunks, p.chunks || 0);
    units = units || p.units.size > 0;
  }
  const swatch = (style) => h("span", { class: "ipukit-swatch", style });
  const items = [];
  for (const [k, [a, pat]] of Object.entries(OP_STYLE)) {
    if (!shown.has(k)) continue;
    const bg = mix(MB[0], a);
    const background = pat === "stripes"
      ? `repeating-linear-gradient(135deg, ${bg} 0 3px, #fff 3px 4.5px)`
      : pat === "dots" ? `radial-gradient(#fff 1px, ${bg} 1.2px) 0 0 / 4px 4px` : bg;
    const name = k === "B" && shown.has("W") ? "B: backward (input gradient if split)" : OP_NAMES[k];
    items.push(h("span", { class: "ipukit-key", "data-op": k }, swatch({ background }), name));
  }
  // the thin bars under the boxes (spans that are no op), as colourOf draws them: links
  // blue, a phase in its colour, the rest grey together (pipeline_timeline.thin_kinds)
  const THIN = { link: "#0072B2", sync: "#8E6BBE", exchange: "#E69F00" };
  const ops = new Set(["F", "B", "R", "W", "compute"]);
  const kinds = new Set();
  for (const p of panels) {
    for (let i = 0; i < p.num_spans; i++) kinds.add(p.kinds[p.kind[i]]);
  }
  const thin = new Map();
  for (const k of [...kinds].filter((k) => !ops.has(k)).sort()) {
    const c = THIN[k] || "#7f7f7f";
    if (!thin.has(c)) thin.set(c, []);
    thin.get(c).push(k);
  }
  if (!items.length) return "";
  for (const [c, ks] of thin) {
    items.push(h("span", { class: "ipukit-key", "data-op": "thin" },
      swatch({ background: c, height: "4px" }), `thin bar: ${ks.map((k) => short(k, 24)).join(", ")}`));
  }
  if (chunks > 1) {
    const bands = Array.from({ length: chunks }, (_, c) => swatch({ background: chunkColour(c, chunks),
      width: "10px", height: "6px" }));
    items.push(h("span", { class: "ipukit-key", "data-op": "chunk" }, bands,
      ` band: chunk 0…${chunks - 1} (F3c1: chunk 1)`));
  }
  if (units) {
    items.push(h("span", { class: "ipukit-key", "data-op": "unit" },
      swatch({ background: "none", borderTop: "2px solid #111", height: "6px" }), "bracket: ops run as one unit"));
  }
  return h("div", { class: "ipukit-keys" }, "colour = micro-batch:", items);
}

function timelineView(meta, A) {
  const panels = meta.panels.map((p, i) => {
    const n = p.num_spans;
    const o = p.offset;
    const kinds = meta.kinds;
    const unitOf = A.unit ? A.unit.subarray(o, o + n) : new Int8Array(n).fill(-1);
    const units = new Map(); // unit id -> its ops, in order
    unitOf.forEach((u, j) => { if (u >= 0) units.set(u, [...(units.get(u) || []), j]); });
    const kind = A.kind.subarray(o, o + n);
    return { ...p, ipu: A.ipu.subarray(o, o + n), kind, split: kind.some((c) => kinds[c] === "W"),
      stage: A.stage.subarray(o, o + n), mb: A.microbatch.subarray(o, o + n),
      chunk: A.chunk ? A.chunk.subarray(o, o + n) : new Int8Array(n).fill(-1), unitOf, units,
      start: A.start.subarray(o, o + n), dur: A.duration.subarray(o, o + n),
      bytes: A.bytes.subarray(o, o + n), kinds, index: i,
      memT: p.memory.map((m) => A[`mem_t_${i}_${m.ipu}`]),
      memV: p.memory.map((m) => A[`mem_v_${i}_${m.ipu}`]) };
  });
  const makespan = meta.makespan;
  const N = meta.num_frames;
  let x0 = 0; // the visible time window
  let x1 = makespan;
  let layout = [];
  let W = 900;
  let drag = null;
  let dragged = false;
  const compute = new Set(["F", "B", "R", "W", "compute"]);
  const PHASE = { compute: "#009E73", exchange: "#E69F00", sync: "#8E6BBE", host: "#7f7f7f" };
  const opName = (p, i) => { // F3, F3c1 (chunk 1); else the span's label or kind
    const k = p.kinds[p.kind[i]];
    if (compute.has(k) && p.mb[i] >= 0) return `${k}${p.mb[i]}${p.chunk[i] >= 0 ? `c${p.chunk[i]}` : ""}`;
    return (p.labels && p.labels[i]) || k;
  };
  // What an op's box can say, longest first (as ipukit.report.op_labels): F3 · stage 1,
  // F3 s1, F3, 3 (of chunk 1: F3c1 · stage 5, F3c1 s5, F3c1, F3, 3); an op with no
  // micro-batch, its label or kind.
  const opLabels = (p, i) => {
    const k = p.kinds[p.kind[i]];
    if (!(compute.has(k) && p.mb[i] >= 0)) return [short(opName(p, i), 60)];
    const bare = `${short(k, 24)}${p.mb[i]}`;
    const name = p.chunk[i] >= 0 ? `${bare}c${p.chunk[i]}` : bare;
    const staged = p.stage[i] >= 0 ? [`${name} · stage ${p.stage[i]}`, `${name} s${p.stage[i]}`] : [];
    return [...new Set([...staged, name, bare, String(p.mb[i])])];
  };
  const key = timelineKey(panels);
  const timeAt = (k) => (makespan * k) / (N - 1);
  const LEFT = 62;

  function panelRects(w) {
    let y = 4;
    layout = panels.map((p) => {
      const rowH = Math.max(12, Math.min(30, 260 / p.rows.length));
      const spans = { y: y + 18, h: rowH * p.rows.length };
      const mem = { y: spans.y + spans.h + 22, h: 70 }; // room for the stash legend
      y = mem.y + mem.h + 26;
      return { p, rowH, spans, mem };
    });
    return y;
  }
  const X = (t) => LEFT + ((t - x0) / (x1 - x0)) * (W - LEFT - 20);
  const T_ = (x) => x0 + ((x - LEFT) / (W - LEFT - 20)) * (x1 - x0);
  let cache = null;

  function colourOf(p, i) {
    const k = p.kinds[p.kind[i]];
    if (p.mb[i] < 0 && PHASE[k]) return PHASE[k];
    if (OP_STYLE[k]) return mix(MB[Math.max(p.mb[i], 0) % MB.length], OP_STYLE[k][0]);
    if (k === "link") return "#0072B2";
    return "#7f7f7f";
  }
  function spanBox(L, i) { // [x, y, w, h] of span i of panel L
    const p = L.p;
    const r = p.rowOf[p.ipu[i]];
    const k = p.kinds[p.kind[i]];
    const xa = X(p.start[i]);
    const w = Math.max(X(p.start[i] + p.dur[i]) - xa, MIN_OP_PX);
    const y = L.spans.y + r * L.rowH;
    if (compute.has(k)) return [xa, y + 1, w, L.rowH * 0.72];
    return [xa, y + L.rowH * 0.76, w, L.rowH * 0.22];
  }
  function renderSpans() { // the spans of the visible window, drawn once per zoom / size
    const r = window.devicePixelRatio || 1;
    const c = document.createElement("canvas");
    c.width = Math.round(W * r);
    c.height = Math.round(height * r);
    const g = c.getContext("2d");
    g.setTransform(r, 0, 0, r, 0, 0);
    g.font = "10px sans-serif";
    g.textAlign = "center";
    g.textBaseline = "middle";
    for (const L of layout) {
      const p = L.p;
      g.save();
      g.beginPath();
      g.rect(LEFT, L.spans.y, W - LEFT - 20, L.spans.h);
      g.clip();
      for (let i = 0; i < p.num_spans; i++) {
        if (p.start[i] + p.dur[i] < x0 || p.start[i] > x1) continue;
        const [x, y, w, hh] = spanBox(L, i);
        const k = p.kinds[p.kind[i]];
        g.fillStyle = colourOf(p, i);
        g.fillRect(x, y, w, hh);
        if (w >= 4 && OP_STYLE[k] && OP_STYLE[k][1]) pattern(g, OP_STYLE[k][1], x, y, w, hh);
        if (p.chunk[i] >= 0) { // the chunk: a grey band along the bottom
          g.fillStyle = chunkColour(p.chunk[i], p.chunks);
          g.fillRect(x, y + hh * 0.8, w, hh * 0.2);
        }
        if (w >= 6 && compute.has(k)) {
          g.strokeStyle = "white";
          g.lineWidth = 1;
          g.strokeRect(x + 0.5, y + 0.5, w - 1, hh - 1);
        }
        if (w >= 8 && compute.has(p.kinds[p.kind[i]]) && hh >= 9) { // the longest that fits
          const text = opLabels(p, i).find((t) => g.measureText(t).width <= w - 3);
          if (text) {
            g.fillStyle = k === "B" || p.mb[i] < 0 ? "white" : "#1a1a1a";
            g.fillText(text, x + w / 2, y + (p.chunk[i] >= 0 ? hh * 0.42 : hh / 2));
          }
        }
      }
      g.strokeStyle = "#111"; // the ops run as one unit: a bracket over them
      g.lineWidth = 2;
      for (const ops of p.units.values()) {
        const [xa, y] = spanBox(L, ops[0]);
        const [xb, , wb] = spanBox(L, ops[ops.length - 1]);
        if (xb + wb < LEFT || xa > W) continue;
        g.beginPath();
        g.moveTo(xa + 1, y + 5);
        g.lineTo(xa + 1, y);
        g.lineTo(xb + wb - 1, y);
        g.lineTo(xb + wb - 1, y + 5);
        g.stroke();
      }
      g.restore();
      g.strokeStyle = "#bbb";
      g.lineWidth = 1;
      g.strokeRect(LEFT, L.spans.y, W - LEFT - 20, L.spans.h);
      g.fillStyle = "#333";
      g.textAlign = "right";
      g.font = "11px sans-serif";
      p.rows.forEach((q, r2) => g.fillText(`IPU ${q}`, LEFT - 6, L.spans.y + (r2 + 0.4) * L.rowH));
      g.fillStyle = "#111";
      g.textAlign = "left";
      g.font = "bold 12px sans-serif";
      g.fillText(short(p.title, 150), LEFT, L.spans.y - 6);
      view.drawMemory(g, L);
      g.textAlign = "center";
      g.font = "10px sans-serif";
    }
    g.fillStyle = "#333";
    g.font = "11px sans-serif";
    g.textAlign = "center";
    const last = layout[layout.length - 1];
    for (const v of niceTicks(x0, x1, 8)) g.fillText(fmtTime(v), X(v), last.mem.y + last.mem.h + 14);
    g.textAlign = "right";
    g.fillText(`time (${meta.time_unit})${x1 - x0 < makespan * 0.999 ? " · zoomed: double-click to reset" : " · wheel to zoom, drag to pan"}`,
      W - 20, last.mem.y + last.mem.h + 26);
    return c;
  }
  let height = 300;

  const view = {
    kind: "timeline",
    numFrames: N,
    height(w) {
      W = w;
      panels.forEach((p) => { p.rowOf = {}; p.rows.forEach((q, r) => { p.rowOf[q] = r; }); });
      height = panelRects(w) + 16;
      return height;
    },
    resized(w) { W = w; cache = null; },
    draw(ctx, pos, w, hover) {
      if (!cache) cache = renderSpans();
      ctx.drawImage(cache, 0, 0, W, height);
      const t = timeAt(pos);
      const xt = X(t);
      for (const L of layout) {
        // the curtain: what has not happened yet is pale
        if (xt < W - 20) {
          ctx.fillStyle = "rgba(255,255,255,0.78)";
          const xa = Math.max(xt, LEFT);
          ctx.fillRect(xa, L.spans.y + 0.5, W - 20 - xa - 0.5, L.spans.h - 1);
        }
        if (xt >= LEFT && xt <= W - 20) {
          ctx.strokeStyle = "#D62728";
          ctx.lineWidth = 2;
          ctx.beginPath();
          ctx.moveTo(xt, L.spans.y - 2);
          ctx.lineTo(xt, L.mem.y + L.mem.h + 2);
          ctx.stroke();
          const p = L.p;
          p.memT.forEach((ts, j) => { // each IPU's stash now
            ctx.fillStyle = ipuColour(j, p.memT.length);
            ctx.beginPath();
            ctx.arc(xt, L.memY(stashAt(ts, p.memV[j], t)), 4, 0, 2 * Math.PI);
            ctx.fill();
          });
        }
      }
      if (hover && hover.span >= 0) {
        const L = layout[hover.panel];
        const [x, y, ww, hh] = spanBox(L, hover.span);
        ctx.strokeStyle = "#000";
        ctx.lineWidth = 2;
        ctx.strokeRect(x - 1, y - 1, ww + 2, hh + 2);
      }
    },
    drawMemory(ctx, L) {
      const p = L.p;
      const m = L.mem;
      let top = 1;
      p.memV.forEach((v) => { for (let i = 0; i < v.length; i++) top = Math.max(top, v[i]); });
      const Y = (v) => m.y + m.h - (v / top) * m.h;
      L.memY = Y;
      ctx.save();
      ctx.beginPath();
      ctx.rect(LEFT, m.y - 4, W - LEFT - 20, m.h + 8);
      ctx.clip();
      p.memT.forEach((ts, j) => {
        const vs = p.memV[j];
        ctx.strokeStyle = ipuColour(j, p.memory.length);
        ctx.lineWidth = 1.5;
        ctx.beginPath();
        ctx.moveTo(X(0), Y(0));
        for (let i = 0; i < ts.length; i++) {
          ctx.lineTo(X(ts[i]), Y(i ? vs[i - 1] : 0));
          ctx.lineTo(X(ts[i]), Y(vs[i]));
        }
        ctx.lineTo(X(makespan), Y(vs.length ? vs[vs.length - 1] : 0));
        ctx.stroke();
      });
      ctx.restore();
      ctx.strokeStyle = "#bbb";
      ctx.strokeRect(LEFT, m.y, W - LEFT - 20, m.h);
      ctx.fillStyle = "#333";
      ctx.textAlign = "right";
      ctx.font = "10px sans-serif";
      const kib = p.stash_unit === "bytes";
      ctx.fillText(kib ? fmt(top / 1024, 1) : amount(top), LEFT - 6, m.y + 9);
      ctx.fillText("stashed", LEFT - 6, m.y + m.h / 2 + 2);
      ctx.fillText(kib ? "(KiB)" : "(micro-b.)", LEFT - 6, m.y + m.h / 2 + 14);
      ctx.fillText("0", LEFT - 6, m.y + m.h);
      // the legend of the stash lines, one entry per IPU
      ctx.textAlign = "left";
      ctx.font = "11px sans-serif";
      const ly = m.y - 7;
      const note = p.stash_note ? ` (${p.stash_note})` : "";
      const head = `stashed ${kib ? "KiB" : "micro-batches"} per IPU${note} (dot: at the play head):`;
      ctx.fillText(head, LEFT, ly);
      let lx = LEFT + ctx.measureText(head).width + 12;
      for (let j = 0; j < p.memory.length; j++) {
        const text = `IPU ${p.memory[j].ipu}`;
        if (lx + 22 + ctx.measureText(text).width > W - 20) { // no room for more: say so
          ctx.fillText(`… IPU ${p.memory[p.memory.length - 1].ipu}: the lightest`, lx, ly);
          break;
        }
        ctx.strokeStyle = ipuColour(j, p.memory.length);
        ctx.lineWidth = 2.5;
        ctx.beginPath();
        ctx.moveTo(lx, ly - 4);
        ctx.lineTo(lx + 18, ly - 4);
        ctx.stroke();
        ctx.fillText(text, lx + 22, ly);
        lx += 22 + ctx.measureText(text).width + 14;
      }
    },
    hit(x, y) {
      for (const L of layout) {
        if (y < L.spans.y || y > L.spans.y + L.spans.h || x < LEFT) continue;
        const p = L.p;
        const r = Math.floor((y - L.spans.y) / L.rowH);
        const q = p.rows[r];
        const t = T_(x);
        const tol = (x1 - x0) * MIN_OP_PX / (W - LEFT - 20);
        let best = -1;
        for (let i = 0; i < p.num_spans; i++) {
          if (p.ipu[i] !== q) continue;
          if (t >= p.start[i] - 0.01 * tol && t <= p.start[i] + Math.max(p.dur[i], tol)) {
            const [, by, , bh] = spanBox(L, i);
            if (y >= by - 1 && y <= by + bh + 1) { best = i; if (compute.has(p.kinds[p.kind[i]])) break; }
          }
        }
        return best >= 0 ? { panel: p.index, span: best } : null;
      }
      return null;
    },
    tooltip(item) {
      const p = panels[item.panel];
      const i = item.span;
      const k = p.kinds[p.kind[i]];
      const u = meta.time_unit;
      const op = compute.has(k) && p.mb[i] >= 0;
      const what = op ? opName(p, i) : k;
      const label = p.labels && p.labels[i] && p.labels[i] !== what ? ` — ${p.labels[i]}` : "";
      const chunk = p.chunk[i] >= 0 ? ` · chunk ${p.chunk[i]} of IPU ${p.ipu[i]}` : "";
      const unit = p.units.get(p.unitOf[i]);
      return [h("b", {}, what), ` on IPU ${p.ipu[i]}${label}`,
        op && OP_WHAT[k] ? [h("br"), k === "B" && p.split ? SPLIT_B : OP_WHAT[k]] : [], h("br"),
        `stage ${p.stage[i] >= 0 ? p.stage[i] : "–"}${chunk} · micro-batch ${p.mb[i] >= 0 ? p.mb[i] : "–"}`,
        h("br"), `start ${fmtTime(p.start[i])} ${u} · duration ${fmtTime(p.dur[i])} ${u}`,
        p.bytes[i] || u === "cycles" ? [h("br"), `${fmt(p.bytes[i])} bytes`] : [], // not a schedule's 0
        unit ? [h("br"), `one unit: ${unit.map((j) => opName(p, j)).join(" → ")} (its outputs leave when its last op ends)`] : []];
    },
    select(item) {
      const p = panels[item.panel];
      return Math.round((p.start[item.span] / makespan) * (N - 1));
    },
    selection(item) {
      const p = panels[item.panel];
      const i = item.span;
      return { kind: "span", panel: item.panel, index: i, op: p.kinds[p.kind[i]], ipu: p.ipu[i],
        stage: p.stage[i], microbatch: p.mb[i], start: p.start[i], duration: p.dur[i],
        bytes: p.bytes[i] };
    },
    showWindow() {
      if (view.root) view.root.dataset.ipukitWindow = `${x0.toFixed(3)},${x1.toFixed(3)}`;
    },
    zoom(x, factor) {
      const t = T_(x);
      const w = Math.max((x1 - x0) / factor, makespan / 5000);
      const f = (t - x0) / (x1 - x0);
      x0 = Math.max(0, t - f * w);
      x1 = Math.min(makespan, x0 + w);
      x0 = Math.max(0, x1 - w);
      cache = null;
      this.showWindow();
    },
    zoomReset() { x0 = 0; x1 = makespan; cache = null; this.showWindow(); },
    dragStart(x) { drag = { x, x0, x1 }; dragged = false; },
    drag(x) {
      if (!drag) return false;
      const dt = ((drag.x - x) / (W - LEFT - 20)) * (drag.x1 - drag.x0);
      if (Math.abs(drag.x - x) < 3 && !dragged) return false;
      dragged = true;
      const w = drag.x1 - drag.x0;
      x0 = Math.max(0, Math.min(makespan - w, drag.x0 + dt));
      x1 = x0 + w;
      cache = null;
      view.showWindow();
      return true;
    },
    dragEnd() { drag = null; },
    wasDragged() { const d = dragged; dragged = false; return d; },
    readout: (k) => `t = ${fmtTime(timeAt(k))} / ${fmtTime(makespan)} ${meta.time_unit}`,
    header: () => key,
    caption(k) {
      const t = timeAt(k);
      return panels.map((p) => {
        const running = [];
        for (let i = 0; i < p.num_spans; i++) {
          const kk = p.kinds[p.kind[i]];
          if (compute.has(kk) && p.start[i] <= t && t < p.start[i] + p.dur[i]) running.push([p.ipu[i], `IPU ${p.ipu[i]}: ${short(opName(p, i), 80)}`]);
        }
        running.sort((a, b) => a[0] - b[0]);
        const stash = p.memT.map((ts, j) => `IPU ${p.memory[j].ipu}: ${amount(stashAt(ts, p.memV[j], t))}`).join(", ");
        return [h("b", {}, short(p.title)), ` — at the play head: ${running.map((r) => r[1]).join(", ") || "no op running"}. ` +
          `Stashed (${p.stash_unit}): ${stash}.`, h("br")];
      });
    },
  };
  return view;
}

function stashAt(ts, vs, t) {
  let lo = 0;
  let hi = ts.length; // first index with ts > t
  while (lo < hi) { const mid = (lo + hi) >> 1; if (ts[mid] <= t) lo = mid + 1; else hi = mid; }
  return lo ? vs[lo - 1] : 0;
}
function niceTicks(lo, hi, most) {
  const span = Math.max(hi - lo, 1e-9);
  const p = Math.pow(10, Math.floor(Math.log10(span / most)));
  const step = [1, 2, 5, 10].map((m) => m * p).find((s) => span / s <= most) || 10 * p;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(v);
  return out;
}
function fmtTime(v) { return Math.abs(v) >= 100 || Number.isInteger(v) ? fmt(v) : fmt(v, 1); }

function measuresHelp(meta) {
  const pc = (x) => `${(100 * x).toFixed(1)}%`;
  const rows = meta.panels.map((p) => {
    const m = p.measures;
    return tr(short(p.title), pc(m.total), pc(m.ideal), pc(m.span), pc(m.utilisation),
      `${(1 + m.ideal).toFixed(2)}×`);
  });
  const example = meta.panels.find((p) => p.measures.ideal > 1);
  const above = example
    ? `Here "${(100 * example.measures.ideal).toFixed(1)}% of ideal" means the run lasts ` +
      `${(1 + example.measures.ideal).toFixed(2)}× the ideal time. ` : "";
  const b = (text) => h("b", {}, text);
  return h("details", { class: "ipukit-help", open: "" },
    h("summary", {}, "Bubble measures: what the percentages mean"),
    h("div", {},
      h("table", { class: "ipukit-measures" },
        h("tr", {}, ["", "bubble ÷ total", "bubble ÷ ideal", "span", "utilisation",
          "run ÷ ideal"].map((t) => h("th", {}, t))), rows),
      h("p", {}, "The ", b("bubble"), " is the time the IPUs sit idle. ", b("Ideal time"),
        " is the busiest IPU's own work (the run could not be shorter). ", b("Bubble ÷ total"),
        " is the share of the run that is bubble (always below 100%). ", b("Bubble ÷ ideal"),
        " compares the bubble with the ideal time: ",
        b("above 100% the IPUs wait longer than the busiest one works"),
        `, and the run takes (1 + that fraction) × the ideal time. ${above}`, b("Span"),
        " is the same as bubble ÷ total but measured per stage, from its first to its last " +
        "op (the zero-bubble paper's measure). ", b("Utilisation"),
        " is busy time ÷ (IPUs × run time).")));
}

function timelineControls(model, meta) {
  const c = meta.controls;
  if (!c) return null;
  const origin = {}; // kind -> where it comes from (the option's tooltip)
  c.kinds.forEach((k, i) => { origin[k] = (c.origins || [])[i]; });
  const sel = (name, opts, value) => h("select", { "aria-label": name, "data-setting": name },
    ...opts.map((o) => h("option", { value: String(o), title: origin[o] || null,
      selected: String(o) === String(value) ? "" : null }, String(o))));
  const num = (name, value, max) => h("input", { type: "number", min: "1", max: String(max),
    value: String(value), "aria-label": name, "data-setting": name, style: { width: "4.5em" } });
  const kind = sel("schedule", c.kinds, c.kind);
  const stages = num("stages", c.stages, 16);
  const chunks = num("chunks", c.chunks || 2, 16);
  chunks.title = "chunks per IPU (virtual_stages) of interleaved_1f1b; zb_v and dualpipev " +
    "hold 2 (a V), the others 1";
  const ga = num("gradient accumulation", c.ga, 512);
  const rec = h("input", { type: "checkbox", "aria-label": "recomputation", checked: c.recompute ? "" : null });
  const cmp = sel("compare with", ["none", ...c.kinds], c.compare);
  const error = h("span", { class: "ipukit-error" });
  const tips = () => { // the chosen kinds' origins; chunks only for interleaved 1F1B
    kind.title = origin[kind.value] || "";
    cmp.title = origin[cmp.value] || "";
    chunks.disabled = ![kind.value, cmp.value].includes("interleaved_1f1b");
  };
  tips();
  const send = () => {
    tips();
    model.set("settings", { kind: kind.value, stages: Number(stages.value), ga: Number(ga.value),
      recompute: rec.checked, compare: cmp.value, chunks: Number(chunks.value) });
    model.save_changes();
  };
  for (const e of [kind, stages, chunks, ga, rec, cmp]) e.addEventListener("change", send);
  const onError = () => { error.textContent = model.get("error") || ""; };
  model.on("change:error", onError);
  onError();
  const lab = (text, e) => h("label", {}, text, " ", e);
  return h("div", { class: "ipukit-controls" }, lab("schedule", kind), lab("stages (IPUs)", stages),
    lab("chunks", chunks), lab("gradient accumulation", ga), lab("recomputation", rec),
    lab("compare with", cmp), error);
}

// ---- MemoryMap -------------------------------------------------------------------------
const MAGMA = ["#fcfdbf", "#fec287", "#fc8961", "#e24f5c", "#b73779", "#812581", "#51127c",
  "#1d1147", "#000004"];
function magma(f) {
  const x = Math.max(0, Math.min(1, f)) * (MAGMA.length - 1);
  const i = Math.min(Math.floor(x), MAGMA.length - 2);
  const a = rgb(MAGMA[i]);
  const b = rgb(MAGMA[i + 1]);
  const u = x - i;
  return `rgb(${a.map((c, j) => Math.round(c + (b[j] - c) * u)).join(",")})`;
}

function memoryView(meta, A) {
  const T = meta.layout.num_ipus * meta.layout.tiles_per_ipu;
  const names = meta.names; // "total" then the categories
  const cats = meta.categories;
  const values = (k) => {
    if (k === 0) {
      const out = new Float64Array(T);
      for (let j = 0; j < cats.length; j++) for (let t = 0; t < T; t++) out[t] += A.memory[j * T + t];
      return out;
    }
    return A.memory.subarray((k - 1) * T, k * T);
  };
  const cache = names.map((_, k) => values(k));
  const worst = (k, n) => Array.from(cache[k].keys()).sort((a, b) => cache[k][b] - cache[k][a] || a - b)
    .slice(0, n).filter((t) => cache[k][t] > 0);
  let g = null;
  let bars = null;
  let layer = null;
  const buttons = h("div", { class: "ipukit-categories", role: "group", "aria-label": "category" });
  // remote buffers are in Streaming Memory, off the IPU: a line of their own, not the map
  const sm = meta.streaming_memory;
  const smLine = sm ? `Streaming Memory (remote buffers, off the IPU; not in this map): ` +
    `${fmt(sm.bytes)} B in ${sm.buffers} buffer${sm.buffers > 1 ? "s" : ""}` : "";
  const view = {
    kind: "memory",
    numFrames: names.length,
    playAll: true, // Play shows every category, from the total
    extraControls: buttons,
    height: () => (sm ? 380 : 360),
    resized(w, hgt) {
      g = gridGeometry(meta, 10, 8, w * 0.55, hgt - (sm ? 70 : 50));
      bars = { x0: w * 0.66, y0: 30, w: w * 0.31, h: hgt - 80 };
    },
    draw(ctx, pos, w, hover) {
      const k = Math.floor(pos);
      layer = cachedLayer(layer, ctx, k, w, (lc) => this.drawFrame(lc, k, w));
      outlineTile(ctx, g, hover);
    },
    drawFrame(ctx, k, w) {
      const v = cache[k];
      // one absolute scale for every category, from 0 to the fullest tile's total: equal
      // colours are equal bytes (MemoryMap.scale)
      const level = (x) => x / Math.max(meta.scale, 1);
      for (let t = 0; t < T; t++) {
        const [x, y] = tileXY(g, t);
        ctx.fillStyle = magma(level(v[t]));
        ctx.fillRect(x, y, g.cell, g.cell);
      }
      drawIpuFrames(ctx, g);
      worst(k, 5).forEach((t, r) => {
        const [x, y] = tileXY(g, t);
        const s = g.cell < 6 ? 3 * g.cell : g.cell;
        ctx.strokeStyle = "#00B4F0";
        ctx.lineWidth = 2.2;
        ctx.strokeRect(x + g.cell / 2 - s / 2, y + g.cell / 2 - s / 2, s, s);
        if (g.cell > 36) {
          ctx.fillStyle = level(v[t]) > 0.45 ? "white" : "black";
          ctx.font = "bold 11px sans-serif";
          ctx.textAlign = "center";
          ctx.fillText(`#${r + 1}`, x + g.cell / 2, y + g.cell / 2 - 2);
          ctx.fillText(`tile ${t}`, x + g.cell / 2, y + g.cell / 2 + 11);
        }
      });
      // the colour bar
      const cy = g.y0 + g.rows * g.cell + 14;
      for (let i = 0; i < 100; i++) {
        ctx.fillStyle = magma(i / 99);
        ctx.fillRect(g.x0 + i * 2, cy, 2, 10);
      }
      ctx.fillStyle = "#333";
      ctx.font = "11px sans-serif";
      ctx.textAlign = "left";
      ctx.fillText(`0 … ${fmt(meta.scale)} B: one scale for every category (the fullest tile's ` +
        `total; a tile has ${fmt(meta.bytes_per_tile / 1024)} KiB)`, g.x0 + 210, cy + 9);
      if (sm) {
        ctx.fillStyle = "#555";
        ctx.fillText(smLine, g.x0, cy + 29);
      }
      this.drawBars(ctx);
    },
    drawBars(ctx) {
      const ws = worst(0, 8);
      const b = bars;
      let top = 1;
      ws.forEach((t) => { top = Math.max(top, cache[0][t]); });
      const rowH = b.h / 9;
      ctx.font = "11px sans-serif";
      ws.forEach((t, r) => {
        let x = b.x0;
        cats.forEach((c, j) => {
          const w = (A.memory[j * T + t] / top) * b.w;
          ctx.fillStyle = meta.category_colours[c] || "#999";
          ctx.fillRect(x, b.y0 + r * rowH, w, rowH * 0.75);
          x += w;
        });
        ctx.fillStyle = "#333";
        ctx.textAlign = "right";
        ctx.fillText(`tile ${t}`, b.x0 - 4, b.y0 + r * rowH + rowH * 0.5);
      });
      ctx.textAlign = "left";
      ctx.fillText("fullest tiles (all categories)", b.x0, b.y0 - 8);
      cats.forEach((c, j) => {
        const y = b.y0 + 8 * rowH + 4 + j * 13;
        ctx.fillStyle = meta.category_colours[c] || "#999";
        ctx.fillRect(b.x0, y, 10, 10);
        ctx.fillStyle = "#333";
        ctx.fillText(short(c, 60), b.x0 + 14, y + 9);
      });
    },
    hit(x, y) { const t = tileAt(g, x, y); return t >= 0 ? { tile: t } : null; },
    tooltip(item, k) {
      const t = item.tile;
      const rows = cats.map((c, j) => tr(c, `${fmt(A.memory[j * T + t])} B`));
      return [h("b", {}, `tile ${t}`), ` (IPU ${Math.floor(t / meta.layout.tiles_per_ipu)}): ` +
        `${fmt(cache[0][t])} B, ${(100 * cache[0][t] / meta.bytes_per_tile).toFixed(1)}% full`,
      h("table", { class: "ipukit-mem" }, rows)];
    },
    select: () => null,
    selection(item) {
      const t = item.tile;
      const out = { kind: "tile", tile: t, ipu: Math.floor(t / meta.layout.tiles_per_ipu), total: cache[0][t] };
      cats.forEach((c, j) => { out[c] = A.memory[j * T + t]; });
      return out;
    },
    readout: (k) => names[k],
    header: (k) => h("span", { class: "ipukit-title" }, `Tile memory: ${short(names[k])} ` +
      `(${meta.layout.num_ipus} IPU${meta.layout.num_ipus > 1 ? "s" : ""} × ` +
      `${fmt(meta.layout.tiles_per_ipu)} tiles)`),
    caption(k) {
      // the title is the table's caption and the header a spaced, ruled row (copied as
      // text it reads "tile IPU bytes ...", not one word)
      const rows = worst(k, 5).map((t) => [tr(String(t), String(Math.floor(t / meta.layout.tiles_per_ipu)),
        fmt(cache[k][t]), `${(100 * cache[0][t] / meta.bytes_per_tile).toFixed(1)}%`), "\n"]);
      const head = ["tile", "IPU", "bytes", "tile full (all categories)"].map((t) => [h("th", {}, t), " "]);
      const table = h("table", { class: "ipukit-worst" }, "\n",
        h("caption", {}, `Fullest tiles (${short(names[k])})`), "\n", h("tr", {}, head), "\n", rows);
      if (!sm) return table;
      const largest = sm.largest.map(([name, b]) => `${short(name)} ${fmt(b)} B`).join(", ");
      return [table, "\n", h("p", { class: "ipukit-streaming" }, `${smLine} (largest: ` +
        `${largest}${sm.buffers > sm.largest.length ? ", ..." : ""})`)];
    },
  };
  return view;
}

// ---- entry points -------------------------------------------------------------------------
function build(model, el) {
  const { meta, arrays } = decode(model.get("_payload"));
  el.replaceChildren();
  let view;
  if (meta.kind === "bsp") view = bspView(meta, arrays);
  else if (meta.kind === "timeline") {
    view = timelineView(meta, arrays);
    view.extraControls = timelineControls(model, meta);
    view.help = measuresHelp(meta);
  } else view = memoryView(meta, arrays);
  const dispose = player(model, el, view);
  if (meta.kind === "memory") {
    const box = view.extraControls;
    const buttons = meta.names.map((name, k) => h("button", { type: "button",
      "data-frame": String(k), "aria-pressed": "false",
      onclick: () => { model.set("frame", k); model.save_changes(); } }, short(name, 60)));
    box.append(...buttons);
    const mark = () => buttons.forEach((b, k) => b.setAttribute("aria-pressed",
      String(k === Number(view.root.dataset.ipukitFrame))));
    new MutationObserver(mark).observe(view.root, { attributes: true,
      attributeFilter: ["data-ipukit-frame"] });
    mark();
  }
  return dispose;
}

function render({ model, el }) {
  let dispose = build(model, el);
  const rebuild = () => { dispose(); dispose = build(model, el); };
  model.on("change:_payload", rebuild);
  return () => { dispose(); model.off("change:_payload", rebuild); };
}

// A stand-in for the widget model in a saved page: the same get/set/on, no kernel.
export function localModel(state) {
  const handlers = {};
  return {
    get: (k) => state[k],
    set(k, v) {
      const old = state[k];
      state[k] = v;
      if (old !== v) (handlers[`change:${k}`] || []).slice().forEach((f) => f());
    },
    save_changes() {},
    on(evt, f) { (handlers[evt] = handlers[evt] || []).push(f); },
    off(evt, f) { handlers[evt] = (handlers[evt] || []).filter((x) => x !== f); },
  };
}

export function standalone(el, state) {
  el.replaceChildren(); // the static picture, shown where scripts do not run
  return render({ model: localModel(state), el });
}

export default { render };
