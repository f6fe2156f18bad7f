"""MNIST logistic regression on a 4-tile IPU Model (Graphcore's old ``tut5_ml``).

A port of ``simple_applications/poplar/mnist/regression-demo.cpp``: ``y = Wx + b``,
softmax, cross-entropy loss and per-sample SGD (eta 0.0009), all built from poplibs ops;
a ``Repeat`` runs 300 samples per ``Engine.run``, streaming images and labels in and the
number of correct predictions out. Pixels are scaled by 1/256 as in the C++. It trains on
MNIST's training set when it is in the user cache (see :mod:`ipukit.data`), otherwise on
the bundled 10,000-image test split.

Run: ``python -m ipukit.tutorials.mnist_regression [epochs] [percent]`` (the C++ defaults
to 50 epochs of all images).
"""

from __future__ import annotations

import sys

import numpy as np

import ipukit as ipu
from ipukit.data import FILES, cache_dir, load_raw
from ipukit.examples._cli import Parser, positive_int
from ipukit.poplibs import poplin, popnn, popops, poputil

BATCH_SIZE = 300  # samples per Engine.run (the Repeat count)
ETA = 0.0009
IMAGE_SIZE = 784


def load_images():
    """(images float32 (n, 784) scaled by 1/256, labels uint32 (n,)), training set if cached."""
    split = "train" if all((cache_dir() / f).exists() for f in FILES["train"]) else "test"
    images, labels = load_raw(split)
    data = images.reshape(len(images), -1).astype(np.float32) / 256
    return data, labels.astype(np.uint32)


def build(device):
    """The graph and training program of the demo: returns (graph, train_prog)."""
    graph = ipu.Graph(device.target)
    x = graph.add_variable(ipu.FLOAT, [IMAGE_SIZE, 1], "x")
    w = graph.add_variable(ipu.FLOAT, [10, IMAGE_SIZE], "W")
    b = graph.add_variable(ipu.FLOAT, [10, 1], "b")
    for t in (x, w, b):
        poputil.map_tensor_linearly(graph, t)
    graph.create_host_write("weights", w)
    graph.create_host_write("biases", b)
    num_correct = graph.add_variable(ipu.UNSIGNED_INT, [1], "numCorrect")
    expected = graph.add_variable(ipu.UNSIGNED_INT, [1], "expected")
    poputil.map_tensor_linearly(graph, num_correct)
    poputil.map_tensor_linearly(graph, expected)

    m_prog = ipu.Sequence()
    t = poplin.mat_mul(graph, w, x, m_prog, "Wx")
    y = popops.add(graph, t, b, m_prog, "Wx+b")
    loss = graph.add_variable(ipu.FLOAT, [1], "loss")
    poputil.map_tensor_linearly(graph, loss)
    delta = graph.add_variable(ipu.FLOAT, [1, 10], "delta")
    poputil.map_tensor_linearly(graph, delta)
    softmax_y = popnn.non_linearity(graph, popnn.NonLinearityType.SOFTMAX, y.transpose(),
                                    m_prog, "softmax(Wx+b)")
    m_prog.add(popnn.calc_loss(graph, softmax_y, expected, loss, delta, num_correct,
                               popnn.CROSS_ENTROPY_LOSS, "dE/d(Wx+b)"))
    popops.scaled_add_to(graph, b, delta.transpose(), -ETA, m_prog, "b += -eta * dE/db")
    w_grad = poplin.mat_mul(graph, delta.transpose(), x.transpose(), m_prog, "dE/dW")
    popops.scaled_add_to(graph, w, w_grad, -ETA, m_prog, "W += -eta * dE/dW")

    data_in = graph.add_host_to_device_fifo("data", ipu.FLOAT, IMAGE_SIZE)
    label_in = graph.add_host_to_device_fifo("labels", ipu.UNSIGNED_INT, 1)
    num_correct_out = graph.add_device_to_host_fifo("hostNumCorrect", ipu.UNSIGNED_INT, 1)
    zero = graph.add_constant(ipu.UNSIGNED_INT, [1], 0, "zero")
    graph.set_tile_mapping(zero, 0)
    train = ipu.Sequence(
        ipu.Copy(zero, num_correct),
        ipu.Repeat(BATCH_SIZE, ipu.Sequence(ipu.Copy(data_in, x), ipu.Copy(label_in, expected),
                                            m_prog)),
        ipu.Copy(num_correct, num_correct_out))
    return graph, train


def train(epochs: int = 50, percent: float = 100.0, profile: bool = False,
          seed: int = 0) -> list[tuple[int, int, int]]:
    """Train and print ``Epoch E (P%), accuracy A%`` lines; returns them as tuples."""
    if not (isinstance(epochs, int | np.integer) and epochs >= 1):
        raise ipu.IpuError(f"epochs={epochs!r}: train at least 1 epoch")
    data, labels = load_images()
    num_images = int(np.floor(percent / 100.0 * len(data))) if np.isfinite(percent) else 0
    if not 1 <= num_images <= len(data):
        raise ipu.IpuError(
            f"percent={percent} of the {len(data):,} images gives {num_images:,} images; "
            f"use a percent from {100 / len(data):g} to 100")
    device = ipu.IPUModel(num_ipus=1, tiles_per_ipu=4).create_device()
    graph, train_prog = build(device)
    engine = ipu.Engine(graph, train_prog, {"debug.retainDebugInformation": "true"})
    engine.load(device)
    engine.connect_stream("data", data[:num_images])
    engine.connect_stream("labels", labels[:num_images])
    h_num_correct = np.zeros(1, np.uint32)
    engine.connect_stream("hostNumCorrect", h_num_correct)
    rng = np.random.default_rng(seed)  # the C++ uses std::mt19937's normal(0, 1)
    engine.write_tensor("weights", rng.normal(0, 1, (10, IMAGE_SIZE)).astype(np.float32))
    engine.write_tensor("biases", rng.normal(0, 1, (10, 1)).astype(np.float32))

    lines, total_correct, total_tested = [], 0, 0
    # At least one run, as the C++ test's `regression-demo 1 1.0` needs on the 10,000-image
    # split (100 images < one batch): the stream buffers are circular, so it cycles them.
    batches = max(1, num_images // BATCH_SIZE)
    for epoch in range(1, epochs + 1):
        for batch in range(1, batches + 1):
            engine.run(0)
            total_correct += int(h_num_correct[0])
            total_tested += BATCH_SIZE
            if profile and epoch == 1 and batch == 1:
                engine.print_profile_summary()
            if total_tested > num_images // 20:  # at least another 20th of an epoch
                percent_correct = total_correct * 100 // total_tested
                epoch_percent = batch * 100 // batches
                print(f"Epoch {epoch} ({epoch_percent}%), accuracy {percent_correct}%")
                lines.append((epoch, epoch_percent, percent_correct))
                total_correct = total_tested = 0
    return lines


def main(argv=None) -> int:
    parser = Parser(prog="mnist_regression", description=__doc__.splitlines()[0])
    parser.add_argument("epochs", type=positive_int, nargs="?", default=50)
    parser.add_argument("percent", type=float, nargs="?", default=100.0,
                        help="the share of the images to train on, in percent")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    print("Using the IPU Model")
    try:
        train(args.epochs, args.percent)
    except ipu.IpuError as e:
        parser.error(str(e))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
