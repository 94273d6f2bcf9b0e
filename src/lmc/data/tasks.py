"""What a model's output and its target are: the task, defined in one place.

A :class:`Task` says how a model's output and an example's target are laid out, and from that
the loss, the accuracy and the per-example reduction every other package uses (training, path
evaluation, calibration, ECE, ensembles, STE, stitching):

- ``classification`` (:data:`CLASSIFICATION`): one label per example. Output ``(N, C)``
  logits, target ``(N,)`` int64 class indices. One prediction per example.
- ``next-token`` (:data:`NEXT_TOKEN`): a label per position of a token window. Output
  ``(N, T, C)`` logits (position t's logits predict token t + 1; ``C`` is the vocabulary),
  target ``(N, T)`` int64 token ids (the window's inputs shifted by one: a window
  x_1..x_T has targets x_2..x_{T+1}). ``T`` predictions per example.

Conventions shared by every task (``P`` = predictions per example, ``M = N·P``):

- :meth:`Task.flatten` turns ``(output, target)`` into ``(logits (M, C), labels (M,))``, the
  predictions in example-major order: example i's predictions are rows ``i·P .. i·P + P − 1``
  (:meth:`Task.rows`). For classification it returns its arguments unchanged.
- Loss (:meth:`Task.loss`): the mean cross-entropy over all M predictions, in nats (per token
  for next-token; its exponential is the perplexity). Accuracy (:meth:`Task.correct`): the
  fraction of predictions whose argmax (first index on ties) is the label.
- Per-example loss (:meth:`Task.per_example_loss`): ``(N,)``, the mean cross-entropy over the
  example's P predictions (the whole window's mean for next-token). Every example has the same
  P, so the mean over examples of the per-example losses is the loss.
- Subsets of a split (calibration and held-out subsets, cross-fitting folds, STE's held-out
  slice) are drawn over *examples*, i.e. whole windows, never parts of one;
  :meth:`Task.rows` maps example indices to their prediction rows.

Everything that scores a model asks its task (training, :func:`lmc.train.evaluate`, path
evaluation, calibration, ECE, ensembles, STE, stitching): :meth:`Task.loss` (differentiable
mean), :meth:`Task.per_example_loss`, :meth:`Task.loss_sum`, :meth:`Task.stack_losses`
(float64, a stack of models at once) and :meth:`Task.accuracy`, :meth:`Task.correct`,
:meth:`Task.correct_count`, :meth:`Task.stack_accuracy` (``None`` for a task without an
accuracy), and :meth:`Task.calibration_layout` for temperature calibration (``None`` where
calibration has no meaning: :attr:`Task.calibrates` is ``False``).

A later task is one :func:`register_task` call: a :class:`Task`, or a subclass for another
output. A subclass for another layout overrides :meth:`Task.flatten_output`,
:meth:`Task.flatten_target` and :meth:`Task.check`; one whose output is not class logits (a
regression, say) overrides the loss methods (:meth:`Task.loss`,
:meth:`Task.prediction_losses`, :meth:`Task.loss_sum`, :meth:`Task.stack_losses`), returns
``None`` from the accuracy ones (:meth:`Task.correct`, :meth:`Task.stack_accuracy`) and is
made with ``calibrates=False`` (calibration and ECE are then refused with an ``LmcError``).
:func:`get_task` finds a task by name. A :class:`lmc.data.Dataset` carries its task in
``dataset.task`` (``get_task(ds.task)`` or ``ds.task_spec``), and every consumer takes it
from there, never from the dataset's name.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lmc.config import LmcError, check_labels, lookup_name


@dataclass(frozen=True)
class Task:
    """A task: the layout of a model's output and target, and the metrics that follow.

    ``name``: the registry key (``dataset.task``); ``target_axes``: the axes of one split's
    target: 1 for ``(N,)`` (one label per example), 2 for ``(N, T)`` (a label per position);
    the output has the target's shape plus a trailing class axis ``C``. ``description``: one
    line for help texts. Instances are immutable and compared by value.
    """

    name: str
    target_axes: int
    description: str = ""
    #: Whether temperature calibration (softmax(β·logits) fitted on held-out predictions) and
    #: the ECE have a meaning for this task's output: ``False`` for an output that is not
    #: class logits (e.g. a regression's values).
    calibrates: bool = True

    # -- layout -------------------------------------------------------------------------
    def check(
        self,
        output: torch.Tensor | None,
        target: torch.Tensor,
        *,
        name: str = "labels",
        num_classes: int | None = None,
    ) -> None:
        """``LmcError`` unless ``target`` is a ``target_axes``-D integer tensor of indices in
        ``[0, C)`` and ``output`` (the model's output on any number of the examples, e.g. one)
        has the per-example layout ``target`` asks for: ``output.shape[1:-1] ==
        target.shape[1:]`` plus a class axis. ``C`` is ``num_classes`` when given, else
        ``output.shape[-1]``; ``output`` may be ``None`` (only the target is checked)."""
        if output is not None and num_classes is None:
            num_classes = int(output.shape[-1])
        if self.target_axes == 1:
            check_labels(name, target, num_classes)  # 1-D integer class indices in range
        else:
            if not isinstance(target, torch.Tensor):
                raise LmcError(f"{name} must be a tensor, got {type(target).__name__}")
            if target.dim() != self.target_axes:
                raise LmcError(
                    f"{name} must have shape {self.target_layout()} for the {self.name} task, "
                    f"got shape {tuple(target.shape)}"
                )
            check_labels(name, target.reshape(-1), num_classes)
        if output is not None and (
            output.dim() != self.target_axes + 1 or output.shape[1:-1] != target.shape[1:]
        ):
            raise LmcError(
                f"the model's output has shape {tuple(output.shape)} but the {self.name} task "
                f"needs {self.output_layout()} for {name} of shape {tuple(target.shape)}"
            )

    def target_layout(self) -> str:
        """The target's layout in words, e.g. ``(N,) class indices``."""
        return "(N,) class indices" if self.target_axes == 1 else "(N, T), an index per position"

    def output_layout(self) -> str:
        """The output's layout in words, e.g. ``(N, C) logits``."""
        return "(N, C) logits" if self.target_axes == 1 else "(N, T, C) logits"

    def predictions_per_example(self, target: torch.Tensor) -> int:
        """``P``: the predictions one example of ``target`` (a split's target) holds: 1 for
        classification, T for next-token."""
        per = 1
        for size in target.shape[1 : self.target_axes]:
            per *= int(size)
        return per

    def flatten(
        self, output: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits (M, C), labels (M,))``: one row per prediction, example-major (module doc).
        Classification returns ``(output, target)`` themselves (no copy, no reshape)."""
        return self.flatten_output(output), self.flatten_target(target)

    def flatten_output(self, output: torch.Tensor) -> torch.Tensor:
        """``(N, ..., C)`` -> ``(M, C)`` (a view where possible; classification: ``output``)."""
        if self.target_axes == 1:
            return output
        return output.reshape(-1, output.shape[-1])

    def flatten_target(self, target: torch.Tensor) -> torch.Tensor:
        """``(N, ...)`` -> ``(M,)`` (classification: ``target`` itself)."""
        if self.target_axes == 1:
            return target
        return target.reshape(-1)

    def flatten_stack(self, outputs: torch.Tensor) -> torch.Tensor:
        """Outputs of k models stacked on a leading axis, ``(k, N, ..., C)`` -> ``(k, M, C)``
        (classification: ``outputs`` itself)."""
        if self.target_axes == 1:
            return outputs
        return outputs.reshape(outputs.shape[0], -1, outputs.shape[-1])

    def rows(self, examples: torch.Tensor, per_example: int) -> torch.Tensor:
        """The prediction rows (of :meth:`flatten`) of the examples ``examples`` (int64 indices):
        ``examples[j]·P + p`` for p = 0..P − 1, example by example, in the order given. With
        ``P = 1`` (classification) ``examples`` itself."""
        if per_example == 1:
            return examples
        offsets = torch.arange(per_example, dtype=examples.dtype, device=examples.device)
        return (examples.view(-1, 1) * per_example + offsets).reshape(-1)

    # -- metrics ------------------------------------------------------------------------
    def loss(
        self, output: torch.Tensor, target: torch.Tensor, *, label_smoothing: float = 0.0
    ) -> torch.Tensor:
        """Mean cross-entropy (nats) over every prediction, a scalar with ``output``'s dtype
        (``F.cross_entropy`` on the flattened predictions; differentiable)."""
        logits, labels = self.flatten(output, target)
        return F.cross_entropy(logits, labels, label_smoothing=label_smoothing)

    def prediction_losses(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Cross-entropy (nats) of every prediction, shaped like ``target``."""
        logits, labels = self.flatten(output, target)
        return F.cross_entropy(logits, labels, reduction="none").view(target.shape)

    def per_example_loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """``(N,)``: each example's mean cross-entropy over its predictions (nats)."""
        losses = self.prediction_losses(output, target)
        if self.target_axes == 1:
            return losses
        return losses.reshape(len(losses), -1).mean(dim=1)

    def loss_sum(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The sum of every prediction's loss (nats), a float64 scalar (cross-entropy taken in
        float32 on the flattened predictions); divided by :meth:`num_predictions` of the whole
        split it is the loss (what :func:`lmc.train.evaluate` sums batch by batch)."""
        logits, labels = self.flatten(output, target)
        return F.cross_entropy(logits.float(), labels, reduction="sum").double()

    def stack_losses(
        self, outputs: torch.Tensor, targets: torch.Tensor, beta: float = 1.0
    ) -> torch.Tensor:
        """Per-prediction losses of a stack of k models, float64 ``(k, M)``.

        ``outputs``: ``(k, M, C)`` (:meth:`flatten_stack`), ``targets``: ``(M,)``
        (:meth:`flatten_target`) on the outputs' device. The cross-entropy of
        softmax(beta · logits): ``logsumexp_j(beta·z_kmj) − beta·z_km,label_m``, one set of
        kernels for the whole stack; a subset mean of its rows is that subset's loss.
        """
        z = outputs.double()
        if beta != 1.0:
            z = z * float(beta)
        target = z.gather(2, targets.view(1, -1, 1).expand(z.shape[0], -1, 1)).squeeze(2)
        return torch.logsumexp(z, dim=2) - target

    def num_predictions(self, target: torch.Tensor) -> int:
        """``N·P``: the predictions of the targets ``target`` (a split's or a batch's), the
        count the loss and the accuracy are means over."""
        return len(target) * self.predictions_per_example(target)

    def correct(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor | None:
        """Bool tensor shaped like ``target``: whether each prediction's argmax (the first
        index on ties) is its label; ``None`` for a task without an accuracy."""
        return output.argmax(-1) == target

    def correct_count(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor | None:
        """The number of correct predictions (int64 scalar tensor), ``None`` for a task
        without an accuracy."""
        logits, labels = self.flatten(output, target)
        return (logits.argmax(1) == labels).sum()

    def stack_accuracy(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor | None:
        """Per model of a stack (``(k, M, C)`` and ``(M,)``, as :meth:`stack_losses`): the
        fraction of correct predictions, float64 ``(k,)``; ``None`` for a task without an
        accuracy."""
        return (outputs.argmax(2) == targets).double().mean(dim=1)

    def accuracy(self, output: torch.Tensor, target: torch.Tensor) -> float | None:
        """The fraction of predictions that are correct (:meth:`correct`), in float64;
        ``None`` for a task without an accuracy."""
        correct = self.correct(output, target)
        return None if correct is None else correct.double().mean().item()

    # -- calibration --------------------------------------------------------------------
    def calibration_layout(
        self, output: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(logits (M, C), labels (M,))`` as temperature calibration and the ECE read them:
        one row per prediction (classification: as given, unchecked and untouched: the
        caller checks them); ``None`` when calibration has no meaning for this task
        (:attr:`calibrates` is ``False``). ``LmcError`` when the shapes do not fit the task."""
        if not self.calibrates:
            return None
        if self.target_axes == 1:
            return output, target
        if not isinstance(target, torch.Tensor) or target.dim() != self.target_axes:
            shape = (
                tuple(target.shape) if isinstance(target, torch.Tensor) else type(target).__name__
            )
            raise LmcError(
                f"labels must have shape {self.target_layout()} for the {self.name} task, "
                f"got {shape}"
            )
        if tuple(output.shape[:-1]) != tuple(target.shape):
            raise LmcError(
                f"logits must have shape {self.output_layout()} to match labels of shape "
                f"{tuple(target.shape)}, got {tuple(output.shape)}"
            )
        return self.flatten(output, target)

    def require_calibration(self, what: str = "calibration") -> None:
        """``LmcError`` unless calibration has a meaning for this task (:attr:`calibrates`);
        ``what`` names what was asked for."""
        if not self.calibrates:
            raise LmcError(
                f"{what} has no meaning for the {self.name} task: its outputs are not class "
                "logits, so there is no softmax temperature to fit (evaluate with "
                "calibrate=False; lmc interpolate: --no-calibrate)"
            )

    def __str__(self) -> str:
        return self.name


#: The registered tasks by name (:func:`register_task`).
TASKS: dict[str, Task] = {}


def register_task(task: Task) -> Task:
    """Add ``task`` to :data:`TASKS` under ``task.name`` and return it; ``LmcError`` when the
    name is taken by another task."""
    known = TASKS.get(task.name)
    if known is not None and known != task:
        raise LmcError(f"a task named {task.name!r} is already registered")
    TASKS[task.name] = task
    return task


def get_task(task: str | Task | None = None) -> Task:
    """The :class:`Task` named ``task`` (a :class:`Task` is returned as it is; ``None`` is
    ``classification``); ``LmcError`` naming the known tasks otherwise."""
    if task is None:
        return CLASSIFICATION
    if isinstance(task, Task):
        return task
    return lookup_name(TASKS, task, "task", sorted(TASKS))


#: One class label per example (the image datasets): output (N, C), target (N,).
CLASSIFICATION = register_task(
    Task("classification", 1, "one class label per example: output (N, C), target (N,)")
)
#: The next token at every position of a window (the text datasets): output (N, T, C),
#: target (N, T).
NEXT_TOKEN = register_task(
    Task(
        "next-token",
        2,
        "the next token at every position of a window: output (N, T, C), target (N, T)",
    )
)
