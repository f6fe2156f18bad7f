"""A pipeline as plain data and back: the rebuilt pipeline trains exactly as the original,
and what the kit does not have, or too much of it, is refused with a named error."""

import copy

import numpy as np
import pytest

from ipukit.grading import plain
from ipukit.parallel import nn, optim, pipeline
from ipukit.parallel.concurrent import ShardedSoftmaxCrossEntropy, split_dense
from ipukit.parallel.pipeline_data import PipelineDataError, from_plain, to_plain


def _pipelines():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(24, 2, 3)).astype(np.float32), rng.integers(0, 4, 24)
    yield (pipeline([[nn.Flatten(), nn.Dense(6, 5, rng=1), nn.ReLU()], [nn.Dense(5, 4, rng=2)]],
                    [0, 1], 4, "interleaved", optimizer=optim.Adam(0.01),
                    loss=nn.SoftmaxCrossEntropy(), repeat_count=2), x, y)
    yield (pipeline([[nn.Flatten(), nn.Dense(6, 5, rng=1)], split_dense(nn.Dense(5, 4), 2)],
                    [0, [1, 2]], 8, "grouped", optimizer=optim.SGD(0.1, momentum=0.9),
                    loss=ShardedSoftmaxCrossEntropy(), recomputation=True,
                    output_mode="final"), x, y)


@pytest.mark.parametrize("index", [0, 1])
def test_the_rebuilt_pipeline_trains_as_the_original(index):
    p, x, y = list(_pipelines())[index]
    q = from_plain(plain.decode(plain.encode(to_plain(p))))
    assert q.options == p.options and type(q.optimizer) is type(p.optimizer)
    assert [s.ipus for s in q.stages] == [s.ipus for s in p.stages]
    for _ in range(2):
        np.testing.assert_array_equal(q.run(x, y).losses, p.run(x, y).losses)
    for k, v in p.params.items():
        np.testing.assert_array_equal(q.params[k], v)


def test_what_the_kit_does_not_have_or_too_much_is_refused():
    p, _, _ = next(_pipelines())
    good = to_plain(p)

    def refused(change, match):
        data = copy.deepcopy(good)
        change(data)
        with pytest.raises(PipelineDataError, match=match):
            from_plain(data)

    layer = ("stages", 0, "members", 0, 1)

    def at(data, path):
        for k in path:
            data = data[k]
        return data

    refused(lambda d: at(d, layer).update({"class": "__main__.Dense"}),
            "'__main__.Dense' is not a layer of ipukit.parallel.nn")
    refused(lambda d: at(d, layer)["settings"].update({"in_features": 1 << 15,
                                                       "out_features": 1 << 15}),
            "make a layer of about 1073741824 elements, more than the 4194304")
    refused(lambda d: at(d, layer)["params"].update({"weight": np.zeros((5, 6))}),
            r"weight 'weight' has shape \(5, 6\), Dense.* holds \(6, 5\)")
    refused(lambda d: d["stages"].extend([d["stages"][0]] * 300), "at most 256 items")
    refused(lambda d: d["options"].update({"emulate": True}), "without emulate=True")
    refused(lambda d: d["options"].update({"gradient_accumulation": 1 << 30}),
            r"option gradient_accumulation must be an integer in 0..65536")
    refused(lambda d: d["options"].update({"compile": "x"}), r"\['compile'\] are not")
    refused(lambda d: d["options"].update({"gradient_accumulation": 1 << 15,
                                           "repeat_count": 4}),
            "a schedule of about 262144 steps, more than the 65536")
    refused(lambda d: d.update({"optimizer": {"class": "builtins.object", "settings": {}}}),
            "optimizer 'builtins.object' is not one of ipukit.parallel.optim's")
    refused(lambda d: d.update({"loss": "os.system"}), "loss 'os.system' is not one of")

    class Mine(nn.Layer):
        def forward(self, x):
            return x, None

    with pytest.raises(PipelineDataError, match="Mine is not a layer of the kit"):
        to_plain(pipeline([[Mine()], [nn.Dense(6, 4)]], [0, 1], 4,
                          optimizer=optim.SGD(), loss=nn.SoftmaxCrossEntropy()))
