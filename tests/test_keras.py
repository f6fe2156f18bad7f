"""Keras on the IPU (``ipukit.parallel.keras``) against Graphcore's documented behaviour.

Sources (graphcore/tensorflow unless said otherwise):
* ``tensorflow/compiler/plugin/poplar/docs/keras_tf2.rst`` ("Keras with IPUs", the guide);
* ``tensorflow/python/ipu/keras/extensions/keras_extension_base.py``,
  ``sequential_extensions.py``, ``functional_extensions.py`` and graphcore/keras
  ``keras/ipu/extensions/extensions_base.py``, ``data_adapter.py`` (the extensions);
* ``tensorflow/compiler/plugin/poplar/docs/keras_tf2_example7.py`` and ``example8.py``.
"""

import copy

import numpy as np
import pytest

from ipukit.errors import PipelineConfigError
from ipukit.parallel import Block, keras, nn, optim, pipeline, training_model
from ipukit.target import IPUModel

D_IN, HIDDEN, CLASSES, MB = 5, 8, 3, 4


def layers(dtype="float32"):
    """A fresh three-layer model, the same initial weights every time."""
    return [nn.Dense(D_IN, HIDDEN, rng=1, dtype=dtype), nn.ReLU(),
            nn.Dense(HIDDEN, CLASSES, rng=2, dtype=dtype)]


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, D_IN)).astype(np.float32), rng.integers(0, CLASSES, n)


def target(ipus):
    return IPUModel("ipu2", num_ipus=ipus).create_device().target


def sequential(stages=(0, 0, 1), ga=4, spe=8, strategy=None, opt=None, **compile_kw):
    """keras_tf2_example7.py's recipe: Sequential, stage assignment, compile, options."""
    with (strategy or keras.IPUStrategy()).scope():
        m = keras.Sequential(layers())
        if stages is not None:
            m.set_pipeline_stage_assignment(list(stages))
        if ga is not None:
            m.set_pipelining_options(gradient_accumulation_steps_per_replica=ga)
        m.compile(opt or optim.SGD(0.1, momentum=0.9), nn.SoftmaxCrossEntropy(),
                  steps_per_execution=spe, **compile_kw)
    return m


def test_the_same_model_trains_identically_in_the_three_front_ends():
    # The TF pipeline (pipelining_ops.pipeline), PopTorch's trainingModel and Keras's fit
    # (which builds a pipelining_ops.pipeline: keras_extension_base.py _make_pipeline) of
    # one model: equal losses and weights. Keras and TF accumulate with SUM
    # (GradientAccumulationReductionMethod.SUM, the default); PopTorch is told to.
    g, di, epochs = 4, 2, 3
    x, y = data(g * di * MB, seed=1)
    runs = {}
    tf = pipeline([layers()[:2], layers()[2:]], [0, 1], gradient_accumulation_count=g,
                  repeat_count=di, optimizer=optim.SGD(0.1, momentum=0.9),
                  loss=nn.SoftmaxCrossEntropy())
    runs["tf"] = ([float(tf.run(x, y).losses.mean()) for _ in range(epochs)],
                  [np.array(v) for v in tf.params.values()])
    a, b = layers(), layers()
    pt = training_model([Block("B0", b[0], b[1], ipu_id=0), Block("B1", b[2], ipu_id=1)],
                        nn.SoftmaxCrossEntropy(), optim.SGD(0.1, momentum=0.9),
                        gradient_accumulation=g, device_iterations=di, reduction="SUM",
                        output_mode="all")
    runs["poptorch"] = ([float(pt.run(x, y).losses.mean()) for _ in range(epochs)],
                        [np.array(v) for v in pt.params.values()])
    with keras.IPUStrategy().scope():
        m = keras.Sequential(a)
        m.set_pipeline_stage_assignment([0, 0, 1])
        m.set_pipelining_options(gradient_accumulation_steps_per_replica=g)
        m.compile(optim.SGD(0.1, momentum=0.9), nn.SoftmaxCrossEntropy(),
                  steps_per_execution=g * di)
        h = m.fit(x, y, batch_size=MB, epochs=epochs, shuffle=False, verbose=0)
    runs["keras"] = (h.history["loss"], m.get_weights())
    for name in ("poptorch", "keras"):
        np.testing.assert_array_equal(runs[name][0], runs["tf"][0], err_msg=name)
        for w, ref in zip(runs[name][1], runs["tf"][1]):
            np.testing.assert_array_equal(w, ref, err_msg=name)
    assert runs["tf"][0][-1] < runs["tf"][0][0]  # it learns
    assert m.pipeline.schedule.kind == "grouped"  # the guide: Grouped by default
    assert m.pipeline.options.offload_optimizer_state  # TF's None: offloaded
    assert h.epoch == [0, 1, 2] and h.params == {"epochs": 3, "steps": g * di}


def test_functional_model_with_pipeline_stage_scopes_trains_like_sequential():
    # keras_tf2_example8.py: layer calls inside `with ipu.keras.PipelineStage(k):`.
    x, y = data(8 * MB, seed=2)
    seq = sequential()
    with keras.IPUStrategy().scope():
        inputs = keras.Input((D_IN,))
        d1, relu, d2 = layers()
        with keras.PipelineStage(0):
            h = relu(d1(inputs))
        with keras.PipelineStage(1):
            out = d2(h)
        fun = keras.Model(inputs=inputs, outputs=out)
        fun.set_pipelining_options(gradient_accumulation_steps_per_replica=4)
        fun.compile(optim.SGD(0.1, momentum=0.9), nn.SoftmaxCrossEntropy(),
                    steps_per_execution=8)
    assert [a.pipeline_stage for a in fun.get_pipeline_stage_assignment()] == [0, 0, 1]
    assert out.shape == (None, CLASSES)
    h1 = seq.fit(x, y, batch_size=MB, epochs=2, verbose=0)
    h2 = fun.fit(x, y, batch_size=MB, epochs=2, verbose=0)
    assert h1.history == h2.history
    for a, b in zip(seq.get_weights(), fun.get_weights()):
        np.testing.assert_array_equal(a, b)
    # an existing functional model: get, change and set its assignment (keras_tf2.rst)
    with keras.IPUStrategy().scope():
        inputs = keras.Input(D_IN)
        d1, relu, d2 = layers()
        plain = keras.Model(inputs, d2(relu(d1(inputs))))
    assignment = plain.get_pipeline_stage_assignment()
    assert [a.pipeline_stage for a in assignment] == [None] * 3
    for a, s in zip(assignment, (0, 1, 1)):
        a.pipeline_stage = s
    plain.set_pipeline_stage_assignment(assignment)
    assert [len(s) for s in plain._stage_layers()] == [1, 2]


def test_steps_per_execution_must_be_a_multiple_of_the_accumulation_steps():
    # graphcore/keras keras/ipu/extensions/extensions_base.py,
    # _verify_and_get_gradient_accumulation_steps_per_replica; keras_tf2.rst: "the
    # steps_per_execution value the model was compiled with must be an integer multiple of
    # gradient_accumulation_steps_per_replica".
    x, y = data(24 * MB)
    with pytest.raises(PipelineConfigError, match=r"The pipelined model has been configured "
                       r"to use gradient accumulation for training, however the current "
                       r"`steps_per_execution` value \(set to 6\) is not divisible by "
                       r"`gradient_accumulation_steps_per_replica` \(4\)"):
        sequential(ga=4, spe=6).fit(x, y, batch_size=MB, verbose=0)
    m = sequential(stages=None, ga=None, spe=6)
    m.set_gradient_accumulation_options(gradient_accumulation_steps_per_replica=4)
    with pytest.raises(PipelineConfigError, match=r"The model has been configured to use "
                       r"gradient accumulation .* \(set to 6\) is not divisible"):
        m.fit(x, y, batch_size=MB, verbose=0)


def test_a_pipelined_model_needs_its_accumulation_steps():
    # extensions_base.py: "The model which you are attempting to train is pipelined, however
    # `gradient_accumulation_steps_per_replica` has not been set through
    # `set_pipelining_options()`."
    x, y = data(8 * MB)
    with pytest.raises(PipelineConfigError, match="attempting to train is pipelined, however "
                       "`gradient_accumulation_steps_per_replica` has not been set"):
        sequential(ga=None).fit(x, y, batch_size=MB, verbose=0)
    with pytest.raises(PipelineConfigError, match="Expected `gradient_accumulation_steps_per_"
                       "replica` to be a positive integer, but got 0 instead"):
        sequential(ga=0)


def test_sequential_stage_assignment_errors():
    # sequential_extensions.py, set_pipeline_stage_assignment and its validation.
    with keras.IPUStrategy().scope():
        m = keras.Sequential(layers())
    with pytest.raises(PipelineConfigError, match=r"The size of the provided "
                       r"`pipeline_stage_assignment` \(2\) does not match the number of layers "
                       r"in the model \(currently 3\)"):
        m.set_pipeline_stage_assignment([0, 1])
    with pytest.raises(PipelineConfigError, match="needs to be a list"):
        m.set_pipeline_stage_assignment((0, 0, 1))
    with pytest.raises(PipelineConfigError, match="The first layer in a pipelined sequential "
                       "model needs to be assigned to the 0th pipeline stage, however it was "
                       "assigned to 1"):
        m.set_pipeline_stage_assignment([1, 1, 2])
    with pytest.raises(PipelineConfigError, match="Layer dense_1 has been assigned to pipeline "
                       "stage 2, however the previous layer in the Sequential model was "
                       "assigned to pipeline stage 0"):
        m.set_pipeline_stage_assignment([0, 0, 2])
    with pytest.raises(PipelineConfigError, match="instances of either `int` or "
                       "`SequentialLayerPipelineStageAssignment`"):
        m.set_pipeline_stage_assignment([0, 0.0, 1])
    assignment = m.get_pipeline_stage_assignment()
    assert [str(a) for a in assignment][1] == "Layer: re_lu is assigned to pipeline stage: None"
    with pytest.raises(PipelineConfigError, match="Layer dense has not been assigned a "
                       "pipeline stage"):
        m.set_pipeline_stage_assignment(assignment)
    m.set_pipeline_stage_assignment([0, 1, 1])
    lines = []
    m.print_pipeline_stage_assignment_summary(print_fn=lines.append)
    assert [line.split() for line in lines[1:]] == [["dense", "(Dense)", "0"],
                                                    ["re_lu", "(ReLU)", "1"],
                                                    ["dense_1", "(Dense)", "1"]]
    m.reset_pipeline_stage_assignment()  # no longer pipelined: one IPU
    assert [a.pipeline_stage for a in m.get_pipeline_stage_assignment()] == [None] * 3
    m.set_pipeline_stage_assignment([0, 1, 1])
    m.add(nn.ReLU())  # adding a layer invalidates the assignment
    m.set_pipelining_options(gradient_accumulation_steps_per_replica=4)
    m.compile(optim.SGD(0.1), nn.SoftmaxCrossEntropy(), steps_per_execution=4)
    with pytest.raises(PipelineConfigError, match="invalidated the pipeline stage assignment"):
        m.fit(*data(4 * MB), batch_size=MB, verbose=0)
    # one stage only: pipelining_ops.pipeline's "Pipeline requires at least two
    # computational stages"
    with pytest.raises(PipelineConfigError, match="at least two computational stages"):
        sequential(stages=(0, 0, 0)).fit(*data(8 * MB), batch_size=MB, verbose=0)


def test_functional_stage_assignment_errors():
    # functional_extensions.py: PipelineStage and _get_pipelined_post_order.
    with pytest.raises(PipelineConfigError, match="PipelineStage may only be used from "
                       "within an IPUStrategy context"):
        with keras.PipelineStage(0):
            pass
    with keras.IPUStrategy().scope():
        with pytest.raises(PipelineConfigError, match="-1 is not a valid pipeline stage"):
            with keras.PipelineStage(-1):
                pass
        with pytest.raises(PipelineConfigError, match="Pipeline stages must not be nested"):
            with keras.PipelineStage(0), keras.PipelineStage(1):
                pass
        inputs = keras.Input((D_IN,))
        d1, relu, d2 = layers()
        with keras.PipelineStage(0):
            h = relu(d1(inputs))
        with pytest.raises(PipelineConfigError, match="All layers of a pipelined model must "
                           "have an associated pipeline stage. However, dense_1 has not been "
                           "assigned to one"):
            keras.Model(inputs, d2(h))
        with keras.PipelineStage(2):
            out = d2(h)
        with pytest.raises(PipelineConfigError, match="found pipeline stages 0, 2, however "
                           "the following pipeline stages are missing 1"):
            keras.Model(inputs, out)
        d1, relu, d2 = layers()
        with keras.PipelineStage(1):
            h = relu(d1(inputs))
        with keras.PipelineStage(0):
            out = d2(h)
        with pytest.raises(PipelineConfigError, match="Layer dense_1 in pipeline stage 0 has a "
                           "dependency from a pipeline stage which has not yet executed"):
            keras.Model(inputs, out)
        with pytest.raises(PipelineConfigError, match=r"Dense\(8, 3\) called on a tensor of "
                           r"shape \(None, 5\)"):
            layers()[2](inputs)


def test_models_are_made_inside_the_strategy_and_compiled_before_fit():
    # keras_tf2.rst: "Keras model creation must be inside the strategy.scope of an
    # IPUStrategy"; Keras: "You must compile your model before training/testing";
    # extensions_base.py _check_mode: "Keras models cannot run eagerly".
    with pytest.raises(PipelineConfigError, match="inside `with strategy.scope\\(\\):`"):
        keras.Sequential(layers())
    with keras.IPUStrategy().scope():
        m = keras.Sequential(layers())
    with pytest.raises(PipelineConfigError, match="You must compile your model"):
        m.fit(*data(4 * MB), batch_size=MB)
    with pytest.raises(PipelineConfigError, match="cannot run eagerly when using `IPUStrategy`"):
        m.compile(optim.SGD(0.1), nn.SoftmaxCrossEntropy(), run_eagerly=True)
    with pytest.raises(PipelineConfigError, match="optimizer must be an optimiser object"):
        m.compile("sgd", nn.SoftmaxCrossEntropy())


def test_device_mapping_options_and_pipelining_kwargs():
    # sequential_extensions.py set_pipelining_options: device_mapping "a list of length
    # equal to the number of pipeline stages"; keras_extension_base.py
    # _set_pipelining_options_impl: the kwargs it refuses; pipelining_ops.py "Each stage
    # must be mapped to an IPU".
    m = sequential()
    with pytest.raises(PipelineConfigError, match="Expected `device_mapping` to be a list of "
                       "integers"):
        m.set_pipelining_options(device_mapping=(1, 0))
    m.set_pipelining_options(gradient_accumulation_steps_per_replica=4,
                             device_mapping=[1, 0, 2])
    with pytest.raises(PipelineConfigError, match="Each stage must be mapped to an IPU: "
                       "device_mapping has 3 entries for 2 computational stages"):
        m.fit(*data(8 * MB), batch_size=MB, verbose=0)
    m.set_pipelining_options(device_mapping=[1, 0])
    m.fit(*data(8 * MB), batch_size=MB, verbose=0)
    assert [s.ipus for s in m.pipeline.stages] == [(1,), (0,)]
    for key, match in [("gradient_accumulation_count", "Set the "
                        "`gradient_accumulation_steps_per_replica` argument"),
                       ("repeat_count", "automatically set by Keras"),
                       ("outfeed_loss", "not compatible with Keras"),
                       ("offload_activations", "does not model")]:
        with pytest.raises(PipelineConfigError, match=f"`{key}`.*{match}"):
            m.set_pipelining_options(**{key: 1})
    m.set_pipelining_options(pipeline_schedule="Interleaved",
                             offload_weight_update_variables=False)
    m.fit(*data(8 * MB), batch_size=MB, verbose=0)
    assert m.pipeline.schedule.kind == "interleaved"
    assert not m.pipeline.options.offload_optimizer_state and m.last_result.host_bytes == 0


def test_recomputation_comes_from_the_configured_system():
    # keras_tf2.rst: recomputation_mode is a pipelining kwarg; pipelining_ops.py: "Only
    # applies if recomputation is enabled" (IPUConfig.allow_recompute).
    m = sequential(strategy=keras.IPUStrategy(allow_recompute=True))
    m.set_pipelining_options(recomputation_mode="RecomputeAndBackpropagateInterleaved")
    m.fit(*data(8 * MB), batch_size=MB, verbose=0)
    assert m.pipeline.options.recomputation
    assert m.pipeline.schedule.recomputation_mode == "RecomputeAndBackpropagateInterleaved"
    assert {r.kind for r in m.last_result.timeline} >= {"R"}


def test_data_must_divide_into_whole_batches_and_executions():
    # graphcore/keras keras/ipu/extensions/data_adapter.py (IPUDataHandler): partial
    # batches are refused; steps_per_execution above the batches is cut to them (warned);
    # it must divide the batches.
    m = sequential(spe=8)
    with pytest.raises(PipelineConfigError, match=r"partial batch.*\(currently set to 4\)"):
        m.fit(*data(8 * MB + 1), batch_size=MB, verbose=0)
    with pytest.raises(PipelineConfigError, match="`steps_per_execution` must be a divisor of "
                       "the number of batches in the dataset provided"):
        m.fit(*data(12 * MB), batch_size=MB, verbose=0)
    with pytest.warns(UserWarning, match="`steps_per_execution` has been set to 8 but the "
                      "dataset provided only contains 4 batches. Using 4"):
        m.fit(*data(4 * MB), batch_size=MB, verbose=0)
    assert m.pipeline.repeat_count == 1
    x, y = data(32 * 8)
    m.fit(x.astype(np.float64), y, epochs=1, verbose=0)  # batch_size None: 32, float64 cast
    assert m.last_result.losses.shape == (2, 1, 4)


def test_replicas_take_batches_in_turn_and_train_as_the_tf_pipeline():
    # extensions_base.py _get_replication_factor: num_ipus // (shards rounded up to a power
    # of two); keras_tf2.rst "Automatic data parallelism": effective batch size =
    # batch size x accumulation steps x replicas; the infeed deals consecutive batches to
    # the replicas in turn, each replica logs its own metrics (the last one's is kept).
    g, replicas, spe = 4, 2, 4
    x, y = data(spe * replicas * MB * 2, seed=5)
    m = sequential(ga=g, spe=spe, strategy=keras.IPUStrategy(target(4)))
    h = m.fit(x, y, batch_size=MB, shuffle=False, verbose=0)
    assert m.pipeline.replication_factor == 2 and m.pipeline.repeat_count == 1
    tf = pipeline([layers()[:2], layers()[2:]], [0, 1], gradient_accumulation_count=g,
                  replication_factor=replicas, optimizer=optim.SGD(0.1, momentum=0.9),
                  loss=nn.SoftmaxCrossEntropy(), target=target(4))
    last = []
    for call in np.split(np.arange(len(x)), 2):  # two executions
        batches = call.reshape(spe, replicas, MB)  # batch b goes to replica b % R
        order = batches.transpose(1, 0, 2).reshape(-1)  # the runner's (replica, micro-batch)
        last.append(tf.run(x[order], y[order]).losses[0, -1])  # replica R-1's batches
    assert h.history["loss"] == [pytest.approx(float(np.mean(last)), rel=1e-12)]
    for a, b in zip(m.get_weights(), tf.params.values()):
        np.testing.assert_array_equal(a, b)
    # three stages: rounded up to 4 IPUs per replica
    three = keras.IPUStrategy(target(8))
    assert three.replication_factor(3) == 2 and keras.IPUStrategy(target(4)).replication_factor(
        3) == 1
    with pytest.raises(PipelineConfigError, match="Current device has 1 IPUs attached, however "
                       "the current model requires a multiple of 2 IPUs"):
        sequential(strategy=keras.IPUStrategy(target(1))).fit(x, y, batch_size=MB, verbose=0)
    with pytest.warns(UserWarning, match="The remaining 1 batch will be dropped"):
        m.fit(*data(9 * MB), batch_size=MB, verbose=0)


def test_a_model_without_stages_accumulates_on_one_ipu():
    # keras_tf2.rst "Gradient accumulation": set_gradient_accumulation_options wraps the
    # optimizer in GradientAccumulationOptimizerV2: gradients summed over the steps, one
    # weight update per accumulation; its state is offloaded by default (perf_training.rst
    # "Optimizer state offloading ... enabled by default ... when
    # GradientAccumulationOptimizerV2 is used"). Reference: plain NumPy accumulation.
    g, lr = 4, 0.1
    x, y = data(g * MB * 2, seed=7)
    with keras.IPUStrategy().scope():
        m = keras.Sequential(layers())
        m.set_gradient_accumulation_options(gradient_accumulation_steps_per_replica=g)
        m.compile(optim.SGD(lr), nn.SoftmaxCrossEntropy(), steps_per_execution=2 * g)
        m.fit(x, y, batch_size=MB, shuffle=False, verbose=0)
    assert [s.ipus for s in m.pipeline.stages] == [(0,)] and m.pipeline.repeat_count == 2
    assert m.last_result.host_bytes == 0  # SGD without momentum: no state to offload
    assert m.pipeline.options.offload_optimizer_state
    net, loss = nn.Sequential(*copy.deepcopy(layers())), nn.SoftmaxCrossEntropy()
    for update in range(2):
        acc = {}
        for step in range(g):
            i = (update * g + step) * MB
            net.zero_grad()
            out, cache = net.forward(x[i:i + MB])
            net.backward(loss.backward(loss.forward(out, y[i:i + MB])[1]), cache)
            acc = {k: acc.get(k, 0) + v for k, v in net.grads.items()}
        for k, p in net.params.items():
            p -= lr * acc[k]
    for a, b in zip(m.get_weights(), net.params.values()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    # pipelining options without a stage assignment do nothing (warned)
    m.set_pipelining_options(gradient_accumulation_steps_per_replica=2)
    with pytest.warns(UserWarning, match="set_pipelining_options\\(\\) has no effect"):
        m.fit(x, y, batch_size=MB, verbose=0)
    with pytest.raises(PipelineConfigError, match="Found `num_mini_batches` key"):
        m.set_gradient_accumulation_options(num_mini_batches=2)


def test_predict_and_evaluate():
    x, y = data(8 * MB, seed=9)
    m = sequential()
    net = nn.Sequential(*layers())
    np.testing.assert_array_equal(m.predict(x, batch_size=MB), net.forward(x)[0])
    loss = nn.SoftmaxCrossEntropy()
    want = np.mean([loss.forward(net.forward(x[i:i + MB])[0], y[i:i + MB])[0]
                    for i in range(0, len(x), MB)])
    assert m.evaluate(x, y, batch_size=MB) == pytest.approx(float(want), rel=1e-6)
    with pytest.raises(PipelineConfigError, match="partial batch"):
        m.predict(x[:-1], batch_size=MB)


def test_emulate_runs_the_keras_model_on_the_emulator():
    # emulate=True as in pipeline(...) and training_model(...): the same losses and weights
    # to float32 tolerance, and a trace of the run.
    x, y = data(8 * MB, seed=11)
    a, b = sequential(), sequential(emulate=True)
    ha = a.fit(x, y, batch_size=MB, epochs=2, verbose=0)
    hb = b.fit(x, y, batch_size=MB, epochs=2, verbose=0)
    np.testing.assert_allclose(hb.history["loss"], ha.history["loss"], rtol=1e-4)
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(wb, wa, rtol=1e-4, atol=1e-5)
    assert b.last_result.trace is not None and len(b.last_result.trace) > 0


def test_fit_reports_each_epoch(capsys):
    m = sequential()
    m.fit(*data(8 * MB), batch_size=MB, epochs=2)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["Epoch 1/2", "Epoch 2/2"]


@pytest.mark.parametrize("kind,mapping", [("zb_h1", None), ("dualpipev", [0, 0])])
def test_the_schedules_after_graphcore_take_pipelining_kwargs(kind, mapping):
    # set_pipelining_options passes pipeline_schedule to pipelining_ops.pipeline as is:
    # the kit's other kinds run there too, the same losses and weights as 1F1B. (DualPipeV
    # with one IPU: its two stages in a V on IPU 0; ZB-V refuses one IPU, as its authors'
    # "zero bubble must be enabled with pipeline parallelism".)
    x, y = data(8 * MB, seed=12)
    runs = {}
    for schedule in ("1f1b", kind):
        m = sequential()
        m.set_pipelining_options(pipeline_schedule=schedule,
                                 device_mapping=mapping if schedule == kind else None)
        h = m.fit(x, y, batch_size=MB, epochs=2, verbose=0, shuffle=False)
        runs[schedule] = (h.history["loss"], m.get_weights(), m)
    np.testing.assert_allclose(runs[kind][0], runs["1f1b"][0], rtol=1e-6)
    for w, ref in zip(runs[kind][1], runs["1f1b"][1]):
        np.testing.assert_allclose(w, ref, rtol=1e-5, atol=1e-6)
    m = runs[kind][2]
    assert m.pipeline.schedule.kind == kind
    assert {rec.kind for rec in m.last_result.timeline} >= {"F", "B", "W"}


def test_the_readme_table_has_the_keras_rows():
    # issue 28.1: the README's TF/PopTorch table gains the Keras rows, Graphcore's names on
    # the left, the kit's on the right
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    rows = "\n".join(line for line in readme.splitlines() if line.startswith("| Keras"))
    for name in ("IPUStrategy", "set_pipeline_stage_assignment", "PipelineStage",
                 "set_pipelining_options", "set_gradient_accumulation_options",
                 "steps_per_execution", "fit(", "from ipukit.parallel import keras"):
        assert name in rows, name
    for name in ("IPUStrategy", "Sequential", "PipelineStage", "Model", "Input"):
        assert hasattr(keras, name), name
