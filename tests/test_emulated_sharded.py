"""The sharded tied embedding on the emulator (``sharded_embedding --emulate``)."""

import re

import numpy as np
import pytest

import ipukit as ipu
from ipukit.examples import sharded_embedding
from ipukit.examples.sharded_embedding import make_data, reference, sharded_tied_embedding
from ipukit.parallel import emulated_sharded, sharded


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
