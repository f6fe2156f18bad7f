"""The optimizer step on the device: the weight update, with the optimiser's state in tile
variables (PopART's merged weight update: one compute set per step over a stage's
weights) or, offloaded (``offload_optimizer_state``: TF's ``offload_weight_update_variables``,
PopTorch's ``useOnChipStorage(False)``), in remote buffers in Streaming Memory, copied in
before the update and back after it ("streamed in and out during the weight-update
phase", TF's pipelining docs), so on the tiles it is live during the update only.
"""

from __future__ import annotations

import numpy as np

from ... import backend
from ...errors import IpuError
from ...poplibs import popops, poputil
from ...poplibs.expr import Expr, Sqrt, _1, _2, _3, _4
from ...program import Copy
from ...tensor import FLOAT, Tensor, concat
from .. import optim
from .tensors import by_type, flat, joined, map_like

_5 = Expr("ARG", 5)  # popops' placeholders go on: _5 is the fifth operand


class Optimizer:
    """The weight update on the device, with the optimiser's state in tile variables or,
    offloaded, in remote buffers (Adam's bias corrections, two numbers the host writes
    every step, stay on the tiles (kit convention)).

    Every replica holds its own copy of the state (the same values); with RTS each holds
    the state of its shard only (keys ``"<key>/rts<r>"``, as the NumPy runner's)."""

    def __init__(self, emu, opt):
        self.opt, self.emu = opt, emu
        self.state: dict[tuple[str, int], dict[str, Tensor]] = {}
        #: offloaded state: (key, replica) -> state -> (remote buffer, the key's slice)
        self.remote: dict[tuple[str, int], dict[str, tuple]] = {}
        self.offload = bool(emu.pipeline.offload)
        self.kind = type(opt)
        if self.kind not in (optim.SGD, optim.Momentum, optim.Adam, optim.AdamW):
            raise IpuError(f"the emulator updates weights with SGD, Momentum, Adam or AdamW, "
                           f"got {opt!r}; use emulate=False")

    @staticmethod
    def handle(key, replica, s) -> str:
        return f"optimizer/{key}/{s}" + (f"@replica{replica}" if replica else "")

    def build(self, vg, parts, prog, replica, name, scale=1.0):
        """ONE update of ``parts`` (``(key, weight, gradient accumulator)`` on one virtual
        graph): each step a compute set over their concatenation, as PopART's
        ``mergeVarUpdate`` does for SGD. Each state (momentum, m, v) is one variable mapped
        like the weights, a view of it per key (its host handle); Adam's bias corrections
        stay one pair per key (its step), each read by its key's elements. The gradients are
        read times ``scale`` (MEAN's 1 / gradient_accumulation)."""
        o, graph = self.opt, self.emu.graph
        parts = sorted(parts, key=lambda q: q[2].dtype != FLOAT)  # float gradients first
        w, grads = flat(q[1] for q in parts), []
        for (dt,), rows in by_type((q[2],) for q in parts).items():
            g = flat(t for t, in rows)
            grads.append(g if dt == FLOAT else popops.cast(vg, g, FLOAT, prog,
                                                           f"{name}/to weight type"))
        g = grads[0] if len(grads) == 1 else concat(grads)
        pre = f"replica{replica}/" if replica else ""
        states = {key: {} for key, _, _ in parts}
        copies_out = []

        def state(s, what):  # one variable, mapped like the weights: a view per key
            group = joined(vg, FLOAT, {key: wk.shape for key, wk, _ in parts},
                           f"{name}/{what}", mapped=False)
            map_like(vg, group.all, w)
            for key, t in group.views.items():
                states[key][s] = t
            if self.offload:  # in from Streaming Memory now, back after the update
                buf = graph.add_remote_buffer(f"{name}/{what}", FLOAT,
                                              group.all.num_elements())
                prog.add(Copy(buf, group.all))
                copies_out.append(Copy(group.all, buf))
                for key, bounds in group.bounds.items():
                    self.remote.setdefault((key, replica), {})[s] = (buf.name, bounds)
            return group.all

        def scaled(e):  # the gradient as read (times scale until a step has scaled it)
            return e if scale == 1.0 else e * scale

        if issubclass(self.kind, optim.SGD):
            if o.weight_decay:
                g = popops.map(vg, scaled(_1) + o.weight_decay * _2, [g, w], prog,
                               name + "/decay")
                scale = 1.0
            if o.momentum:
                buf = state("buf", "momentum")
                popops.map(vg, o.momentum * _1 + scaled(_2), [buf, g], prog,
                           name + "/momentum", inplace=True)
                g, scale = buf, 1.0
            popops.map(vg, _1 - o.lr * scaled(_2), [w, g], prog, name + "/sgd", inplace=True)
        else:
            b1, b2 = o.betas
            if o.weight_decay and o.decoupled:
                popops.map(vg, _1 * (1 - o.lr * o.weight_decay), [w], prog, name + "/decay",
                           inplace=True)
            elif o.weight_decay:
                g = popops.map(vg, scaled(_1) + o.weight_decay * _2, [g, w], prog,
                               name + "/decay")
                scale = 1.0
            m, v = state("m", "m"), state("v", "v")
            corr = []  # per key: [1 - beta1^t, 1 - beta2^t], t the key's step
            for key, wk, _ in parts:
                states[key]["corr"] = c = vg.add_variable(
                    FLOAT, [2], f"{pre}optimizer/{key}/bias correction 1 - beta^t")
                vg.set_tile_mapping(c, int(poputil.tile_of_elements(vg, wk)[0]))
                corr.append(c)
            if len(corr) == 1:
                c1, c2 = corr[0][0:1], corr[0][1:2]
            else:  # each key's pair repeated over its elements
                c1, c2 = (concat([c[i:i + 1].broadcast([wk.num_elements()])
                                  for c, (_, wk, _) in zip(corr, parts)]) for i in (0, 1))
            popops.map(vg, b1 * _1 + (1 - b1) * scaled(_2), [m, g], prog, name + "/m",
                       inplace=True)
            popops.map(vg, b2 * _1 + (1 - b2) * scaled(_2) * scaled(_2), [v, g], prog,
                       name + "/v", inplace=True)
            popops.map(vg, _1 - o.lr * (_2 / _4) / (Sqrt(_3 / _5) + o.eps),
                       [w, m, v, c1, c2], prog, name + "/adam", inplace=True)
        for c in copies_out:
            prog.add(c)
        for key, st in states.items():
            self.state[(key, replica)] = st
            for s, t in st.items():
                if s not in self.remote.get((key, replica), {}):
                    graph.create_host_write(self.handle(key, replica, s), t)
                    graph.create_host_read(self.handle(key, replica, s), t)

    def _put(self, eng, key, rep, s, values) -> None:
        """Write state ``s`` of ``key``: its tile variable, or its slice of the remote
        buffer (``Engine.copy_to_remote_buffer``)."""
        if s not in self.remote.get((key, rep), {}):
            eng.write_tensor(self.handle(key, rep, s), values)
            return
        name, bounds = self.remote[(key, rep)][s]
        whole = self._remote_values(eng, name)
        whole[bounds] = np.asarray(values, np.float32).reshape(-1)
        eng.copy_to_remote_buffer(whole, name, 0)

    def _get(self, eng, key, rep, s) -> np.ndarray:
        """State ``s`` of ``key`` read back, shaped like its tile view."""
        if s not in self.remote.get((key, rep), {}):
            return eng.read_tensor(self.handle(key, rep, s))
        name, bounds = self.remote[(key, rep)][s]
        return self._remote_values(eng, name)[bounds].reshape(self.state[(key, rep)][s].shape)

    @staticmethod
    def _remote_values(eng, name) -> np.ndarray:
        buf = eng.executable.graph.remote_buffers[name]
        return eng.copy_from_remote_buffer(name, np.zeros(buf.num_elements, buf.dtype), 0)

    # host <-> device state, so that the optimiser object stays the one truth between calls
    def write(self, eng) -> dict:
        """Write the host state to every replica; returns Adam's step count per key."""
        host, steps = self.opt.state, {}
        for (key, rep), st in self.state.items():
            have = host.get(key)
            if "buf" in st:
                self._put(eng, key, rep, "buf", np.zeros(st["buf"].shape, np.float32)
                          if have is None else backend.to_numpy(have))
            elif "m" in st:
                steps[key] = 0 if have is None else have["step"]
                for m in ("m", "v"):
                    self._put(eng, key, rep, m, np.zeros(st[m].shape, np.float32)
                              if have is None else backend.to_numpy(have[m]))
        return steps

    def read(self, eng, steps: dict, runs: int):
        xp = backend.get_xp()
        for (key, rep), st in self.state.items():
            if rep:
                continue  # every replica holds the same state: read replica 0's
            if "buf" in st:
                self.opt.state[key] = xp.asarray(self._get(eng, key, 0, "buf"))
            elif "m" in st:
                self.opt.state[key] = {
                    "step": steps[key] + runs,
                    "m": xp.asarray(self._get(eng, key, 0, "m")),
                    "v": xp.asarray(self._get(eng, key, 0, "v"))}
