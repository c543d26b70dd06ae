"""A model seen as a function of one flat float vector.

Every algorithm does arithmetic on (d,) and (clients, d) tensors; the module is only used
through `torch.func.functional_call` with views into the flat vector, so the gradient of
the loss with respect to the flat vector comes out flat as well.

BatchNorm's running statistics are not parameters: they live in a second flat vector,
`FlatModel.buffers` (the server's statistics), outside every algorithm. Local training runs
in train mode (batch statistics) and updates a client's own copy; after each round the
engine sets the server's statistics to the data-size-weighted mean of the participants'
copies (L2GD App. A.2: "the batch normalization statistics are included into aggregation",
as FedML's FedAvg does). Evaluation runs in eval mode with the server's statistics. The
statistics are not counted as communication (the ledger sees only what algorithms send).
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fedrepro.errors import ConfigError
from fedrepro.models.mlp import MLP, binary_logistic, logistic


LARGE_EVAL_BATCH = 10_000
# On a GPU several training processes share one card (experiments/device_runs.py): with batches of
# 10 000 a CIFAR-10 CNN process held 6-13 GB and 15 processes ran out of an H100's memory; with
# 2 500 (a quarter of the activations) 12 ran on one without (2026-11-27, docs/performance.md).
GPU_EVAL_BATCH = 2_500


class FlatModel:
    LOSSES = ("cross_entropy", "logistic", "squared")

    def __init__(self, module: nn.Module, loss: str = "cross_entropy"):
        if loss not in self.LOSSES:
            raise ValueError(f"loss={loss!r}; choose one of {self.LOSSES}")
        self.module = module
        # cross_entropy: softmax over classes; logistic: one logit, labels 0/1;
        # squared: least squares 0.5 (f(x) - y)^2 on one output (convex test problems)
        self.loss_kind = loss
        params = dict(module.named_parameters())
        self.names = list(params)
        self.shapes = [p.shape for p in params.values()]
        self.numels = [p.numel() for p in params.values()]
        self.dim = sum(self.numels)
        for p in module.parameters():
            p.requires_grad_(False)  # gradients flow to the flat vector only
        stats = {n: b for n, b in module.named_buffers() if b.is_floating_point()}
        self.buffer_names = list(stats)
        self.buffer_shapes = [b.shape for b in stats.values()]
        self.buffer_numels = [b.numel() for b in stats.values()]
        self.buffers = self.module_buffers()
        # train/eval switching matters only for BatchNorm / dropout; skip it otherwise (cheap steps)
        self._mode_sensitive = any(isinstance(m, (nn.modules.batchnorm._NormBase, nn.Dropout))
                                   for m in module.modules())
        # a forward pass that draws from torch's global generator: clients training on several
        # threads would interleave its draws (engine/local.py trains such a model one at a time)
        self.draws_random = any((isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0)
                                or (isinstance(m, nn.RNNBase) and m.dropout > 0) or isinstance(m, nn.RReLU)
                                for m in module.modules())
        # convolutions run ~1.4x faster on the CPU in channels-last layout (oneDNN's native one;
        # `make bench`'s CNN rows compare both); the flat weights stay as they are
        self.channels_last = any(isinstance(m, nn.Conv2d) for m in module.modules())
        # Samples per forward pass in evaluation on the CPU (engine/evaluate.py). Measured with
        # `make bench`'s evaluate timing (2026-11-22, 1 and 2 threads; docs/performance.md):
        # convolutions and the LSTM evaluate 1.1-3x faster in batches of 250 than of 10 000
        # (their activations stay in cache), the linear stacks are fastest in large batches.
        recurrent = any(isinstance(m, nn.RNNBase) for m in module.modules())
        self.eval_batch = 250 if self.channels_last or recurrent else LARGE_EVAL_BATCH

    def replica_module(self) -> nn.Module:
        """A copy of the module for another thread (functional_call swaps a module's tensors)."""
        return copy.deepcopy(self.module)

    def with_module(self, module: nn.Module) -> "FlatModel":
        """This model computing through `module` (a `replica_module()`): the same layout, loss and
        server statistics."""
        twin = copy.copy(self)
        twin.module = module
        return twin

    def eval_batch_on(self, device: torch.device) -> int:
        """The evaluation batch on `device`: `eval_batch` on the CPU, GPU_EVAL_BATCH elsewhere (on
        an H100, batches of 10 000 evaluated every bench model fastest: the CNN 3.3x and the LSTM
        3.0x faster than in batches of 250; docs/performance.md, "On a GPU")."""
        return self.eval_batch if torch.device(device).type == "cpu" else GPU_EVAL_BATCH

    def flatten_module(self) -> torch.Tensor:
        """The module's current (initialized) parameters as one vector."""
        return torch.cat([p.detach().reshape(-1) for p in self.module.parameters()]).clone()

    def unflatten(self, w: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: v.view(s) for n, v, s in zip(self.names, w.split(self.numels), self.shapes)}

    def module_buffers(self) -> torch.Tensor:
        """The module's own running statistics as one vector (empty without BatchNorm)."""
        stats = dict(self.module.named_buffers())
        if not self.buffer_names:
            return torch.zeros(0)
        return torch.cat([stats[n].detach().reshape(-1) for n in self.buffer_names]).clone()

    @property
    def buffer_dim(self) -> int:
        return int(self.buffers.numel())

    def _tensors(self, w: torch.Tensor, buffers: torch.Tensor | None) -> dict[str, torch.Tensor]:
        tensors = self.unflatten(w)
        if self.buffer_names:
            b = self.buffers if buffers is None else buffers
            tensors.update({n: v.view(s) for n, v, s in
                            zip(self.buffer_names, b.split(self.buffer_numels), self.buffer_shapes)})
        return tensors

    def _mode(self, train: bool) -> None:
        if self._mode_sensitive and self.module.training != train:
            self.module.train(train)

    def logits(self, w: torch.Tensor, x: torch.Tensor, buffers: torch.Tensor | None = None,
               train: bool = False) -> torch.Tensor:
        """Outputs of the model `w`. train=True: BatchNorm uses batch statistics and updates
        `buffers` (a client's copy of the running statistics) in place."""
        self._mode(train)
        if self.channels_last and x.dim() == 4 and x.device.type == "cpu":
            x = x.contiguous(memory_format=torch.channels_last)
        return functional_call(self.module, self._tensors(w, buffers), (x,))

    def loss(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
             buffers: torch.Tensor | None = None) -> torch.Tensor:
        """Mean training loss over the batch (FedDyn's code: sum-reduced loss / batch size)."""
        return self.output_loss(self.logits(w, x, buffers, train=True), y)

    def output_loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The batch-mean loss of the module's outputs `out` (also used by the centralized baseline)."""
        if self.loss_kind == "logistic":
            return F.binary_cross_entropy_with_logits(out.squeeze(1), y.float())
        if self.loss_kind == "squared":
            return 0.5 * (out.squeeze(1) - y).pow(2).mean()
        return F.cross_entropy(out, y)

    def loss_and_correct(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor):
        """(summed loss, number correct) over a batch, for evaluation (eval mode, server statistics)."""
        return self.output_loss_and_correct(self.logits(w, x), y)

    def output_loss_and_correct(self, out: torch.Tensor, y: torch.Tensor):
        """`loss_and_correct` of the module's outputs `out` (engine/evaluate.py's stacked models)."""
        if self.loss_kind == "logistic":
            logit = out.squeeze(1)
            loss = F.binary_cross_entropy_with_logits(logit, y.float(), reduction="sum")
            correct = ((logit > 0).long() == y).sum()
        elif self.loss_kind == "squared":
            loss = 0.5 * (out.squeeze(1) - y).pow(2).sum()
            correct = torch.zeros((), dtype=torch.long)  # accuracy is meaningless for regression
        else:
            loss = F.cross_entropy(out, y, reduction="sum")
            correct = (out.argmax(1) == y).sum()
        return loss, correct


IMAGE_MODELS = {"cnn_cifar": (3, 32, 32), "resnet18_gn": (3, 32, 32), "resnet18": (3, 32, 32),
                "resnet56": (3, 32, 32), "densenet121": (3, 32, 32), "mobilenet": (3, 32, 32)}


def _module(cfg, in_shape: tuple[int, ...], num_classes: int, token_inputs: bool) -> tuple[nn.Module, str]:
    name, in_dim = cfg.name, math.prod(in_shape)
    if name in IMAGE_MODELS and tuple(in_shape) != IMAGE_MODELS[name]:
        raise ConfigError(f"model={name} needs {IMAGE_MODELS[name]} images (dataset=cifar10 or cifar100); "
                          f"this dataset gives inputs of shape {tuple(in_shape)}")
    if name == "mlp":
        return MLP(in_dim, list(cfg.hidden), num_classes), "cross_entropy"
    if name == "logistic":
        return logistic(in_dim, num_classes), "cross_entropy"
    if name == "binary_logistic":
        if num_classes != 2:
            raise ConfigError(f"model=binary_logistic needs a 2-class dataset; this one has {num_classes} classes")
        return binary_logistic(in_dim), "logistic"
    if name == "cnn_cifar":
        from fedrepro.models.cnn import cifar_cnn
        return cifar_cnn(num_classes), "cross_entropy"
    if name == "lstm":
        if len(in_shape) != 1 or not token_inputs:
            raise ConfigError(f"model=lstm reads sequences of character ids (dataset=shakespeare); "
                              f"this dataset gives inputs of shape {tuple(in_shape)}")
        from fedrepro.models.lstm import shakespeare_lstm
        return shakespeare_lstm(vocab=num_classes), "cross_entropy"
    if name in ("resnet18_gn", "resnet18", "resnet56"):
        from fedrepro.models import resnet
        return getattr(resnet, name)(num_classes), "cross_entropy"
    if name in ("densenet121", "mobilenet"):
        from fedrepro.models import zoo
        return getattr(zoo, name)(num_classes), "cross_entropy"
    if name == "matrix":
        d = math.isqrt(in_dim)
        if d * d != in_dim or num_classes != 1:
            raise ConfigError(f"model=matrix needs flattened d x d sensing matrices with real targets "
                              f"(dataset=lowrank); this dataset gives {in_dim} features, {num_classes} classes")
        from fedrepro.models.zoo import matrix_sensing
        return matrix_sensing(d), "squared"
    raise ConfigError(f"model.name={name!r} is unknown; see conf/model/ for the choices")


def model_for(cfg, data) -> tuple[FlatModel, torch.Tensor]:
    """`build_model` for a run config and its loaded dataset (DatasetTensors), seeded as every
    run of that config (federated, centralized, experiment loops) is."""
    from fedrepro.seeding import derive_seed

    return build_model(cfg.model, tuple(data.x_train.shape[1:]), data.num_classes,
                       seed=derive_seed(cfg.seed, "init"), token_inputs=not data.x_train.is_floating_point())


def build_model(cfg, in_shape: tuple[int, ...], num_classes: int, seed: int,
                token_inputs: bool = False) -> tuple[FlatModel, torch.Tensor]:
    """The model named by `cfg` (a ModelConfig) and its seeded initial flat vector;
    `token_inputs`: the inputs are integer ids (text), which only the LSTM reads."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        module, loss = _module(cfg, in_shape, num_classes, token_inputs)
        flat = FlatModel(module, loss=loss)
        return flat, flat.flatten_module()
