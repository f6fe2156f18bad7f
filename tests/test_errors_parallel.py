"""Issue 12: bad model-parallel settings get a clear IpuError; valid NumPy ints are taken."""

import numpy as np
import pytest

from ipukit import backend
from ipukit.errors import IpuError, PipelineConfigError
from ipukit.parallel import Block, nn, optim, pipeline, schedule, sharded, training_model


@pytest.mark.parametrize("args, text", [
    ((0, 3), "in_features"), ((-1, 3), "in_features"), ((2.5, 3), "in_features"),
    (("4", 3), "in_features"), ((4, 0), "out_features"), ((True, 3), "in_features"),
])
def test_dense_sizes_must_be_positive_ints(args, text):
    with pytest.raises(IpuError, match=rf"Dense {text} must be a positive whole number"):
        nn.Dense(*args)


def test_dense_takes_numpy_ints():
    d = nn.Dense(np.int64(4), np.int32(3))
    assert d.params["weight"].shape == (4, 3)
    assert d.out_shape((2, 4)) == (2, 3)


@pytest.mark.parametrize("dtype", ["int8", "int32", "bool", "nonsense"])
def test_layer_dtype_must_be_floating_point(dtype):
    with pytest.raises(IpuError, match=rf"dtype {dtype!r}.*float"):
        nn.Dense(4, 3, dtype=dtype)
    with pytest.raises(IpuError, match=rf"dtype {dtype!r}.*float"):
        nn.Conv2D(1, 2, 3, dtype=dtype)


@pytest.mark.parametrize("kw, text", [
    ({"betas": (1.0, 0.999)}, "Invalid beta parameter at index 0: 1.0"),
    ({"betas": (0.9, -0.1)}, "Invalid beta parameter at index 1: -0.1"),
    ({"lr": -1.0}, "Invalid learning rate: -1.0"),
    ({"eps": -1e-8}, "Invalid epsilon value"),
    ({"weight_decay": -0.1}, "Invalid weight_decay value"),
    ({"betas": 0.9}, "betas"),
])
def test_adam_settings_are_checked_as_pytorch_does(kw, text):
    with pytest.raises(IpuError, match=text):
        optim.Adam(**kw)
    with pytest.raises(IpuError, match=text):
        optim.AdamW(**kw)


@pytest.mark.parametrize("kw, text", [
    ({"lr": float("nan")}, "Invalid learning rate"), ({"momentum": -0.5}, "Invalid momentum"),
])
def test_sgd_settings_are_checked(kw, text):
    with pytest.raises(IpuError, match=text):
        optim.SGD(**kw)


def test_adam_edge_betas_are_fine_and_give_finite_weights():
    p = {"w": np.array([1.0, -2.0])}
    opt = optim.Adam(lr=0.1, betas=(0.0, 0.0))
    opt.step(p, {"w": np.array([0.5, -3.0])})
    assert np.allclose(p["w"], [0.9, -1.9])


def test_collective_log_takes_numpy_ints():
    log = sharded.CollectiveLog(np.int64(2))
    assert log.num_shards == 2 and isinstance(log.num_shards, int)


@pytest.mark.parametrize("axis", [3, -4, 1.0])
def test_shard_axis_out_of_range(axis):
    with pytest.raises(IpuError, match=r"axis .* of a 3-D"):
        sharded.shard(np.ones((4, 4, 4)), 2, axis=axis)


def test_shard_negative_axis_in_range_works():
    parts = sharded.shard(np.arange(8).reshape(2, 4), 2, axis=-1)
    assert [p.tolist() for p in parts] == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]


def test_cross_entropy_labels_must_match_the_rows():
    log = sharded.CollectiveLog(2)
    logits = sharded.shard(np.zeros((1, 4)), 2, axis=1)
    labels = [np.array([0, 1])] * 2  # 2 labels for 1 row
    with pytest.raises(IpuError, match=r"labels.*2.*1 row"):
        sharded.log_softmax_cross_entropy(logits, labels, log)


def test_cross_entropy_right_answer():
    log = sharded.CollectiveLog(2)
    x = np.array([[1.0, 2.0, 3.0, 4.0]])
    ce, _ = sharded.log_softmax_cross_entropy(sharded.shard(x, 2, axis=1),
                                              [np.array([2])] * 2, log)
    ref = -(x[0, 2] - np.log(np.exp(x).sum()))
    assert np.allclose(ce, [ref])


def test_embedding_indices_must_be_integers():
    log = sharded.CollectiveLog(2)
    w = sharded.shard(np.arange(8.0).reshape(4, 2), 2, axis=0)
    with pytest.raises(IpuError, match=r"indices.*integer.*float64"):
        sharded.embedding(w, [np.array([0.0, 3.0])] * 2, log)
    out, _ = sharded.embedding(w, [np.array([0, 3])] * 2, log)
    assert backend.to_numpy(out).tolist() == [[0, 1], [6, 7]]


@pytest.fixture
def sched():
    return schedule("grouped", 2, 4)


@pytest.mark.parametrize("kw, text", [
    ({"t_F": 0, "t_B": 0}, "all durations are 0"),
    ({"t_F": -1}, "t_F.*-1"), ({"t_B": float("nan")}, "t_B"), ({"t_F": "1"}, "t_F"),
    ({"t_F": [1, -2]}, "t_F"),
])
def test_schedule_durations_must_be_non_negative(sched, kw, text):
    for method in (sched.bubble, sched.makespan, sched.utilisation):
        with pytest.raises(PipelineConfigError, match=text):
            method(**kw)


def test_schedule_kind_is_case_insensitive_as_pipeline_is():
    assert schedule("Grouped", 2, 4).kind == "grouped"


def stages():
    return [[nn.Dense(4, 4, rng=0)], [nn.Dense(4, 3, rng=1)]]


def tf_pipe(**kw):
    args = dict(device_mapping=[0, 1], gradient_accumulation_count=4,
                optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy())
    args.update(kw)
    return pipeline(stages(), **args)


@pytest.mark.parametrize("kw, text", [
    ({"optimizer": "sgd"}, r"optimizer must be an optimiser.*'sgd'.*optim.SGD"),
    ({"loss": nn.Dense(3, 3)}, r"loss must be a loss.*Dense\(3, 3\).*SoftmaxCrossEntropy"),
    ({"gradient_accumulation_dtype": "int32"}, r"gradient_accumulation_dtype.*int32.*float"),
])
def test_pipeline_settings_of_the_wrong_kind(kw, text):
    with pytest.raises(PipelineConfigError, match=text):
        tf_pipe(**kw)


def test_dict_device_mapping_is_a_type_error_in_tensorflows_words():
    with pytest.raises(PipelineConfigError,
                       match="device_mapping argument needs to be a list or a tuple") as e:
        tf_pipe(device_mapping={0: 0, 1: 1})
    assert isinstance(e.value, TypeError)


def test_tuple_device_mapping_works():
    assert [s.ipus for s in tf_pipe(device_mapping=(0, 1)).stages] == [(0,), (1,)]


@pytest.fixture
def pipe():
    return tf_pipe()


def test_one_hot_labels_are_refused(pipe):
    x = np.ones((8, 4), np.float32)
    with pytest.raises(IpuError, match=r"labels.*integer class indices.*\(8, 3\).*argmax"):
        pipe.run(x, np.eye(3)[np.zeros(8, int)])


def test_run_without_samples(pipe):
    with pytest.raises(IpuError, match=r"samples x must be an array.*None"):
        pipe.run(None, np.zeros(8, np.int64))


def test_predict_wrong_feature_count(pipe):
    with pytest.raises(PipelineConfigError, match=r"Dense\(4, 4\) expects \(batch, 4\)"):
        pipe.predict(np.ones((3, 5), np.float32))


@pytest.mark.parametrize("bs", [0, -1, 2.5])
def test_predict_batch_size(pipe, bs):
    with pytest.raises(PipelineConfigError, match="batch_size must be a positive"):
        pipe.predict(np.ones((3, 4), np.float32), batch_size=bs)


def test_predict_right_answer(pipe):
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    h = x
    for s in pipe.stages:
        d = s.net.layers[0] if hasattr(s.net, "layers") else s.net
        h = h @ backend.to_numpy(d.params["weight"]) + backend.to_numpy(d.params["bias"])
    assert np.allclose(pipe.predict(x, batch_size=np.int64(2)), h, rtol=1e-5)


def test_training_model_of_a_single_block():
    b = Block("a", nn.Dense(4, 3))
    with pytest.raises(PipelineConfigError, match=r"list of Blocks.*\[Block"):
        training_model(b, nn.SoftmaxCrossEntropy(), optim.SGD(0.1))
    with pytest.raises(PipelineConfigError, match=r"list of Blocks.*Dense"):
        training_model([nn.Dense(4, 3)], nn.SoftmaxCrossEntropy(), optim.SGD(0.1))
