"""The sharded_embedding and sharded_matmul command lines: Graphcore's golden cases 10-12."""

import subprocess
import sys

import numpy as np
import pytest

from ipukit import backend
from ipukit.examples import sharded_embedding, sharded_matmul
from ipukit.parallel import sharded

LARGE = ["--ipus", "4", "--vocab-size", "8000", "--feature-size", "768",
         "--sequence-length", "256"]


def run_main(module, argv, capsys):
    rc = module.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("argv", [[], ["--fp16"], LARGE])
def test_embedding_results_match(argv, capsys):
    rc, out, _ = run_main(sharded_embedding, argv, capsys)
    assert rc == 0
    lines = out.splitlines()
    assert lines[-3].startswith("Reference loss: ") and lines[-2].startswith("Our loss: ")
    assert lines[-1] == "Results match."
    assert "sent over IPU-Links" in out and "Gathering the full logits" in out


def test_embedding_default_golden_values(monkeypatch):
    features, indices = sharded_embedding.make_data(20, 3, 7)
    assert indices.tolist() == [10, 4, 16, 5, 9, 16, 6]
    np.testing.assert_allclose(np.linalg.norm(features, axis=1), 1.0, rtol=1e-6)
    seen = []
    real = sharded.CollectiveLog.all_reduce

    def spy(self, parts, op, label):
        seen.append((op, [backend.to_numpy(p).copy() for p in parts]))
        return real(self, parts, op, label)

    monkeypatch.setattr(sharded.CollectiveLog, "all_reduce", spy)
    result = sharded_embedding.sharded_tied_embedding(features, indices, 2)
    assert result.loss == pytest.approx(2.31536393, abs=1e-6)
    (_, maxima), (_, denominators) = seen
    # The all-reduced max is 1: each normalised row dotted with itself.
    np.testing.assert_allclose(np.maximum(*maxima), 1.0, rtol=1e-6)
    np.testing.assert_allclose(denominators[0], [4.631623, 4.751768, 6.229491, 5.333688,
                                                 3.575070, 6.229491, 6.244357], atol=2e-6)
    np.testing.assert_allclose(denominators[1], [5.667129, 4.757202, 5.764803, 4.320792,
                                                 3.097486, 5.764803, 5.804890], atol=2e-6)
    grad = sharded.unshard(result.grad, axis=0)
    np.testing.assert_allclose(grad[16], [-0.0130221, -0.3308165, -0.1421793], atol=1e-6)
    np.testing.assert_allclose(grad[0], [-0.0100255, 0.0066093, -0.0039203], atol=1e-6)
    owned = [indices[backend.to_numpy(sharded.local_indices(indices, s, 10)[1])].tolist()
             for s in range(2)]
    assert owned == [[4, 5, 9, 6], [10, 16, 16]]
    assert [w.shape for w in result.weights] == [(10, 3), (10, 3)]


def test_embedding_large_golden_values():
    features, indices = sharded_embedding.make_data(8000, 768, 256)
    result = sharded_embedding.sharded_tied_embedding(features, indices, 4)
    assert result.loss == pytest.approx(7.98802658, abs=1e-5)
    grad = sharded.unshard(result.grad, axis=0).astype(np.float64)
    assert np.linalg.norm(backend.to_numpy(grad)) == pytest.approx(0.12633501, rel=1e-5)
    # No IPU ever holds more than its quarter of the logits.
    assert {p.shape for p in result.logits} == {(256, 2000)}


def test_embedding_mismatch_exits_non_zero(monkeypatch, capsys):
    real = sharded_embedding.reference

    def off_by_a_bit(features, indices):
        loss, logits, grad = real(features, indices)
        return loss, logits, grad + 1e-3

    monkeypatch.setattr(sharded_embedding, "reference", off_by_a_bit)
    rc, out, _ = run_main(sharded_embedding, [], capsys)
    assert rc == 1 and "Embedding gradient does not match" in out
    assert "Results match." not in out


def test_no_checks_skips_the_reference(capsys):
    rc, out, _ = run_main(sharded_embedding, ["--no-checks"], capsys)
    assert rc == 0 and "Our loss: " in out and "Reference loss" not in out


def test_matmul_results_match(capsys):
    for argv in ([], ["--fp16"], ["--ipus", "4"]):
        rc, out, _ = run_main(sharded_matmul, argv, capsys)
        assert rc == 0 and out.splitlines()[-1] == "Results match."
    assert "IPU 0: weight columns 0..24" in out


def test_matmul_golden_values():
    lhs, rhs, labels = sharded_matmul.make_data(32, 512, 100)
    assert labels[:8].tolist() == [69, 71, 81, 20, 88, 42, 40, 72]
    assert np.abs(rhs).max() <= 0.0990147543
    result = sharded_matmul.sharded_classifier(lhs, rhs, labels, 2)
    assert result.loss == pytest.approx(5.851729, abs=1e-5)
    np.testing.assert_allclose(result.logits[0][0, :4], [0.379865, 0.539962, 2.120332,
                                                         0.486508], atol=1e-5)
    np.testing.assert_allclose(result.logits[1], lhs @ rhs[:, 50:], rtol=1e-5, atol=1e-5)
    assert np.linalg.norm(backend.to_numpy(result.dlhs)) == pytest.approx(0.233691, rel=1e-5)
    drhs = backend.to_numpy(sharded.unshard(result.drhs, axis=1))
    assert np.linalg.norm(drhs) == pytest.approx(4.100322, rel=1e-5)


@pytest.mark.parametrize("module, argv, message", [
    ("sharded_embedding", ["--ipus", "3"], "20 is not a multiple of 3"),
    ("sharded_embedding", ["--ipus", "1"], "at least 2 IPUs"),
    ("sharded_matmul", ["--ipus", "3"], "100 is not a multiple of 3"),
    ("sharded_matmul", ["--ipus", "0"], "must be at least 1"),
])
def test_bad_shard_counts_exit_cleanly(module, argv, message):
    proc = subprocess.run([sys.executable, "-m", f"ipukit.examples.{module}", *argv],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
