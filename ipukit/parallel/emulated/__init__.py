"""Pipelines on the emulator: ``pipeline(..., emulate=True)``, and sharded ops on it.

Every stage becomes Poplar programs on the tiles of its IPU (a virtual graph,
``Graph::createVirtualGraph``) built from PopLibs-style ops; several stages (chunks) may
share an IPU, as interleaved 1F1B, ZB-V and DualPipeV place them. The stash of each stage
is a FIFO of tile variables (one slot per micro-batch in flight, as TensorFlow's
``PipelineFIFOInserter`` allocates them), so a stash that does not fit shows up, by name,
in the compiler's out-of-memory report. Activations and gradients cross IPUs as ``Copy``
programs; samples and labels come in over host streams (infeeds) and the losses go out
over one (an outfeed). The ops run in the schedule's order: one program per op of the
schedule; a call is ONE ``Engine.run``, its device iterations a ``Repeat`` of the
zeroing, every op and the weight update, as PopART builds its one program
(``willow/src/popx/popprograms.cpp``: ``Repeat(batchesPerStep, ...)``), with the call's
samples and labels streamed in over host streams, a micro-batch at a time (so the trace
shows, for any F, B, W or R op, the supersteps that made it:
:meth:`EmulatedRunResult.steps_of`; Adam's bias corrections are stepped on the device).
A schedule that splits the backward (ZB-H1, ZB-V, DualPipeV) runs its B ops as the input gradient
alone and its W ops as compute sets of their own, writing the weight gradients.

Gradients are accumulated on the device (SUM, MEAN, RUNNING_MEAN, in the accumulator
dtype) and the optimiser (SGD with momentum and weight decay, Adam, AdamW) updates the
weights on the device once per run. Losses and weights equal the NumPy runner's to float32
tolerance. PopART's ``SessionOptions.mergeVarUpdate = MergeVarUpdateType::All``
(``willow/src/transforms/mergevarupdates.cpp``) turns the SGD (and copy) weight updates of
one virtual graph and optimiser into one update over the concatenated, flattened weights
and gradients; ipukit does the same for every optimiser (Adam and AdamW too, with a bias
correction per weight): each stage (each member of a concurrent stage) zeroes its
accumulators, accumulates a micro-batch's gradients and runs each optimiser step as ONE
compute set per type (``stage0/zero accumulators``, ``stage0/accumulate``,
``stage0/optimizer/sgd``). (kit convention: the stage's weights, its gradients and its
accumulators of each type are one variable each, each weight's a view of it, so the
concatenation is one region; PopART concatenates separate tensors.) The backward writes
the gradients where their weights are, so a micro-batch is accumulated without exchange.
(kit convention: with SUM and MEAN a stage's first gradient of a step is copied into its
float accumulators, so they need no zeroing; PopART zeroes its accumulators after each
update.) MEAN's 1/G is folded into the optimiser's step, as PopART folds
the accumulation factor into its optimiser scalars.

Replicas are copies of the stages on their own IPUs; their gradients are all-reduced by
inter-IPU copies and adds (with replicated tensor sharding, each replica updates its
shard of every weight and the shards are gathered by copies).

An inference pipeline (no optimiser) runs its forward stages only, in the schedule's
order, with no stash; the last stage's outputs come back over an outfeed.

The programs are built, compiled and loaded once per micro-batch shape, by the first
``run`` or ahead of it by ``model.compile(x, labels)`` (PopTorch's
``PoplarExecutor.compile``: :func:`compile`), and kept on the pipeline. They hold the
optimiser's settings (learning rate, momentum, betas, eps, weight decay) as constants, so
a change to them (or another optimiser) rebuilds them at the next call, and the run uses
the new values, as the NumPy runner does (see :func:`compile` for PopTorch's way).

Not emulated (a clear :class:`~ipukit.errors.IpuError` says so): concurrent stages in a
replicated pipeline, float64 weights. Offloaded optimiser state
(``offload_optimizer_state``: TF's default in a training pipeline, PopTorch's
``useOnChipStorage(False)``) lives in remote buffers in Streaming Memory and is copied in
before the weight update and back after it (:mod:`.optimizer`): on the tiles it is live
during the update only, and the update's trace has the copies' "remote" steps.

The package, one way from bottom to top: :mod:`.tensors` (tile variables, buffers),
:mod:`.layers` (nn's layers as PopLibs ops), :mod:`.collectives` (GCL's ring and the
copies between IPUs), :mod:`.sharded` (the sharded ops' vertices and builders, the tied
embedding) and :mod:`.sharded_ops` (``CollectiveLog(emulate=True)``), :mod:`.stages`
(stage building), :mod:`.optimizer` (the optimizer step), :mod:`.results` (the trace
read as a timeline) and :mod:`.pipeline` (building, compiling and running it).
"""

from .pipeline import EmulatedPipeline, Emulation, build, compile, run
from .results import EmulatedRunResult, OpSteps, steps_of

__all__ = ["EmulatedPipeline", "EmulatedRunResult", "Emulation", "OpSteps", "build", "compile",
           "run", "steps_of"]
