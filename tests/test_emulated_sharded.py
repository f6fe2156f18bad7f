"""The sharded tied embedding on the emulator (``sharded_embedding --emulate``)."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukit as ipu
from ipukit import cost
from ipukit.examples import sharded_embedding
from ipukit.examples.sharded_embedding import make_data, reference, sharded_tied_embedding
from ipukit.parallel import emulated_sharded, sharded
from ipukit.poplibs import poputil
from ipukit.poplibs.expr import Max, _1, _2


@pytest.mark.parametrize("v, c, n, s", [(20, 3, 7, 2), (48, 8, 16, 4), (60, 5, 33, 3)])
def test_loss_logits_and_tied_gradient_equal_the_numpy_shards(v, c, n, s):
    features, indices = make_data(v, c, n)
    ours = emulated_sharded.tied_embedding(features, indices, s, tiles_per_ipu=8)
    theirs = sharded_tied_embedding(features, indices, s)
    ref_loss, ref_logits, ref_grad = reference(features, indices)
    assert ours.loss == pytest.approx(theirs.loss, rel=1e-6)
    assert ours.loss == pytest.approx(ref_loss, rel=1e-6)
    np.testing.assert_allclose(sharded.unshard(ours.logits, 1), ref_logits, rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(sharded.unshard(ours.grad, 0), ref_grad, rtol=1e-5, atol=1e-7)
    # each shard's logits live on its own IPU, never gathered
    per_ipu = ours.trace.target.tiles_per_ipu
    assert [a.shape for a in ours.logits] == [(n, v // s)] * s
    names = [st.name for st in ours.trace.executed_steps()]
    assert any(name.startswith("projection 1") for name in names)
    crossing = [st for st in ours.trace.executed_steps() if st.inter_ipu_bytes]
    assert crossing and max(st.inter_ipu_bytes for st in crossing) <= n * c * 4
    mem = ours.trace.memory.total
    assert all(mem[q * per_ipu:(q + 1) * per_ipu].sum() > 0 for q in range(s))


def test_collectives_are_inter_ipu_copies_and_shards_overlap():
    features, indices = make_data(40, 4, 9)
    run = emulated_sharded.tied_embedding(features, indices, 2, tiles_per_ipu=4)
    tl = run.trace.timeline()
    computes = [sp for sp in tl if sp.kind == "compute"]
    assert any(a.ipu != b.ipu and a.start < b.end and b.start < a.end
               for a in computes for b in computes)  # the shards compute side by side
    copies = [st for st in run.trace.executed_steps() if st.kind == "copy"
              and st.inter_ipu_bytes]
    assert {st.ipus for st in copies} == {(0, 1)}


def test_cli_emulate_prints_results_match(capsys):
    rc = sharded_embedding.main(["--emulate"])
    out = capsys.readouterr().out
    assert rc == 0 and out.rstrip().endswith("Results match.")
    ours = float(re.search(r"Our loss: (\S+)", out).group(1))
    rc = sharded_embedding.main([])
    plain = float(re.search(r"Our loss: (\S+)", capsys.readouterr().out).group(1))
    assert ours == pytest.approx(plain, rel=1e-6)
    assert "Emulated on 2 IPUs x 16 tiles" in out


def test_cli_emulate_refuses_fp16_and_uneven_splits(capsys):
    assert sharded_embedding.main(["--emulate", "--fp16"]) != 0
    captured = capsys.readouterr()
    assert "float32" in captured.err and "drop --fp16" in captured.err
    with pytest.raises(ipu.IpuError, match="multiple of 3"):
        emulated_sharded.tied_embedding(*make_data(20, 3, 7), 3)


def test_auto_tiles_grow_with_the_shard():
    small = sharded_embedding.auto_tiles(20, 3, 7, 2, 638_976)
    big = sharded_embedding.auto_tiles(8000, 768, 256, 4, 638_976)
    assert small == 16 and big == 256


# -- GCL's ring on the emulator ------------------------------------------------------------
def ring_run(parts_np, op=None, layout="linear", tiles=4, scale=None):
    """``parts_np[r]`` on IPU r (one virtual graph each), all-reduced by the ring; the
    values read back and the run's trace."""
    count = len(parts_np)
    target = ipu.IPUModel("ipu2", num_ipus=count, tiles_per_ipu=tiles).create_device().target
    g, prog = ipu.Graph(target), ipu.Sequence()
    ts = []
    for r, a in enumerate(parts_np):
        vg = g.create_virtual_graph(r * tiles, (r + 1) * tiles)
        t = vg.add_variable(ipu.FLOAT, list(a.shape), f"x{r}")
        if layout == "linear":
            poputil.map_tensor_linearly(vg, t)
        else:  # all on one tile
            vg.set_tile_mapping(t, tiles - 1)
        g.create_host_write(f"x{r}", t)
        g.create_host_read(f"x{r}", t)
        ts.append(t)
    emulated_sharded.ring_all_reduce([[t] for t in ts], prog, "x", op, scale=scale)
    eng = ipu.Engine(g, prog)
    eng.load(ipu.Device(target))
    for r, a in enumerate(parts_np):
        eng.write_tensor(f"x{r}", a)
    eng.run()
    return [eng.read_tensor(f"x{r}") for r in range(count)], eng.trace


@settings(max_examples=12, deadline=None)
@given(count=st.integers(2, 5), size=st.integers(1, 23), seed=st.integers(0, 999),
       layout=st.sampled_from(["linear", "one tile"]))
def test_ring_all_reduce_values_for_any_ranks_and_uneven_sizes(count, size, seed, layout):
    rng = np.random.default_rng(seed)
    parts = [rng.normal(size=size).astype(np.float32) for _ in range(count)]
    summed, _ = ring_run(parts, layout=layout)
    top, _ = ring_run(parts, Max(_1, _2), layout=layout)
    mean, _ = ring_run(parts, layout=layout, scale=1.0 / count)
    total = np.sum(np.stack(parts).astype(np.float64), axis=0)
    for r in range(count):  # the sum's order is the ring's, not NumPy's: float32 tolerance
        np.testing.assert_allclose(summed[r], total, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(mean[r], total / count, rtol=1e-4, atol=1e-6)
        np.testing.assert_array_equal(top[r], np.max(np.stack(parts), axis=0))  # exact
    assert all(np.array_equal(summed[0], s) for s in summed)  # every IPU the same bits


@pytest.mark.parametrize("count, size", [(2, 8), (3, 10), (4, 1000), (4, 3)])
def test_ring_all_reduce_is_2_r_minus_1_copy_steps_joining_every_ipu(count, size):
    parts = [np.full(size, r + 1, np.float32) for r in range(count)]
    out, trace = ring_run(parts)
    assert all((o == count * (count + 1) / 2).all() for o in out)
    steps = trace.executed_steps()
    copies = [s for s in steps if s.inter_ipu_bytes]
    combines = [s for s in steps if s.kind == "compute" and "combine" in s.name]
    assert len(copies) == 2 * (count - 1) and len(combines) == count - 1
    if size >= count:  # else some fragments are empty: fewer IPUs may take part
        assert all(s.ipus == tuple(range(count)) for s in copies + combines)
    # each step: every IPU sends one fragment to its ring neighbour (fragments of popops'
    # splitIntoFragments, sizes differing by at most one element)
    t = trace.target
    ring = emulated_sharded.ring_order(count)
    pairs = {(ring[p], ring[(p + 1) % count]) for p in range(count)}
    for s in copies:
        src, dst, nbytes = s.transfers.T
        a, b = src // t.tiles_per_ipu, dst // t.tiles_per_ipu
        sent = {}
        for x, y, n in zip(a, b, nbytes):
            sent[(int(x), int(y))] = sent.get((int(x), int(y)), 0) + int(n)
        assert set(sent) <= pairs
        assert all(4 * (size // count) <= n <= 4 * -(-size // count) for n in sent.values())
        assert s.sync_cycles == cost.global_sync_cycles(t, len(s.ipus))
        assert s.exchange_cycles >= cost.link_cycles(max(sent.values()), t)
    sent = emulated_sharded.ring_bytes_sent(size, 4, count)
    assert sum(s.inter_ipu_bytes for s in copies) == sum(sent)
    if size % count == 0:
        assert sent == [cost.ring_bytes("allreduce", 4 * size, count)] * count


@pytest.mark.parametrize("count", [2, 4])
@pytest.mark.parametrize("size", [4, 1000, 10_000])
def test_ring_cycles_against_the_cost_model(count, size):
    """The emulated ring takes the cost model's 2(R-1) steps and link bytes, plus what
    the emulator charges on top (module docstring): each step's external sync of the
    ring's IPUs instead of one hop, the on-IPU exchange, the reduce-scatter's adds."""
    _, trace = ring_run([np.ones(size, np.float32)] * count, tiles=16)
    t = trace.target
    ev = [(trace.steps[i], s) for i, s in zip(trace._step_ids, trace._starts)
          if "x/ring " in trace.steps[i].name]
    took = ev[-1][1] + ev[-1][0].cycles - ev[0][1]
    assert took == sum(s.cycles for s, _ in ev)  # every step joins all the ring's IPUs
    frag = 4 * -(-size // count)
    links = 2 * (count - 1) * cost.link_cycles(frag, t)
    ring = cost.ring_cycles("allreduce", 4 * size, count, t)
    assert links >= ring - 2 * (count - 1) * cost.ring_step_cycles(t)  # the same bytes
    assert took >= ring + 2 * (count - 1) * (cost.global_sync_cycles(t, count)
                                             - cost.ring_step_cycles(t))
