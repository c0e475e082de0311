"""The stack's batched-GEMM kernels compute what vmap computes, and nets without that form stay on vmap."""

import copy

import pytest
import torch
from torch import nn

from depl.train.engine.federation import job_from_plan
from depl.train.task.nets import build_net
from depl.train.engine.vectorised import Stack, per_seed_mean_ce, walk_plan_stack
from trainkit import SWITCH_PLAN, make_plan


def _loss_and_grads(stack: Stack, x: torch.Tensor, y: torch.Tensor, laid_out: bool = True):
    """The stack's losses and gradients on parameters as training lays them out (`Stack.trainable`), or as stacked."""
    params = stack.trainable() if laid_out else {k: v.clone().requires_grad_() for k, v in stack.params.items()}
    loss = per_seed_mean_ce(stack.forward(params, stack.buffers, x), y)
    loss.sum().backward()
    return loss.detach(), {k: p.grad for k, p in params.items()}


@pytest.mark.parametrize("net,shape", [("cnn1d", (1, 40)), ("cnn2d", (1, 8, 8)), ("alexnet", (3, 32, 32)),
                                       ("alexnet28", (1, 28, 28))])
def test_gemm_kernels_give_vmaps_losses_and_gradients(net, shape):
    # alexnet max-pools right after its first convolutions: two float32 orders of summation can pick another
    # maximum of a near tie and send its gradient elsewhere (1 % of the layer's scale), so it is compared in float64
    dtype = torch.float64 if net.startswith("alexnet") else torch.float32
    torch.manual_seed(0)
    models = [build_net(net, 4, shape, 10).to(dtype) for _ in range(3)]
    gemm, vmap = Stack(models, "gemm"), Stack(models, "vmap")
    assert gemm.gemm is not None and vmap.gemm is None
    x, y = torch.randn(3, 6, *shape, dtype=dtype), torch.randint(0, 10, (3, 6))
    (lg, gg), (lv, gv) = _loss_and_grads(gemm, x, y), _loss_and_grads(vmap, x, y)
    torch.testing.assert_close(lg, lv, rtol=1e-5, atol=1e-6)
    for k in gv:
        torch.testing.assert_close(gg[k], gv[k], rtol=1e-4, atol=1e-6)
    shared = torch.randn(5, *shape, dtype=dtype)  # the test pass: one input seen by every model
    torch.testing.assert_close(gemm.forward(gemm.params, gemm.buffers, shared, shared=True),
                               vmap.forward(vmap.params, vmap.buffers, shared, shared=True), rtol=1e-5, atol=1e-6)


class _Normed(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv1d(1, 4, 3), nn.BatchNorm1d(4), nn.ReLU(), nn.Flatten(), nn.Linear(152, 10))

    def forward(self, x):
        return self.body(x)


def test_a_net_with_a_layer_without_a_gemm_form_stays_on_vmap():
    assert Stack([build_net("mobilenet", 4, (3, 32, 32), 10) for _ in range(2)]).gemm is None  # depthwise, BN
    auto = Stack([_Normed(), _Normed()])
    assert auto.gemm is None
    assert auto.forward(auto.params, auto.buffers, torch.randn(2, 3, 1, 40)).shape == (2, 3, 10)
    with pytest.raises(ValueError, match="without a batched-GEMM form"):
        Stack([_Normed(), _Normed()], "gemm")
    with pytest.raises(ValueError, match="unknown kernels"):
        Stack([_Normed()], "fast")


def test_trajectories_on_either_kernels_agree_through_fedavg_and_pruning():
    job = job_from_plan(make_plan(SWITCH_PLAN))  # 2-node FedAvg, then switches to the pruned versions
    gemm = walk_plan_stack(job, [0, 5], kernels="gemm")  # "gemm" fails if a pruned net lost its GEMM form
    vmap = walk_plan_stack(job, [0, 5], kernels="vmap")
    for eg, ev in zip(gemm, vmap):
        for a, b in zip(eg, ev):
            assert (a.epoch, a.model, a.switched) == (b.epoch, b.model, b.switched)
            assert a.test_loss == pytest.approx(b.test_loss, rel=1e-4)
            assert a.train_loss == pytest.approx(b.train_loss, rel=1e-4)


class _Strided1d(nn.Module):
    """1-D convolutions of several geometries, each input length a multiple of its output's (the slab form)."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, c, 5, stride=2, padding=2), nn.ReLU(),      # 1 channel: im2col
            nn.Conv1d(c, c, 3, stride=2, padding=1), nn.ReLU(),      # 40 → 20 → 10, mnist1d-small's
            nn.Conv1d(c, c, 5, stride=2, padding=2), nn.ReLU(),      # 10 → 5: shifts −1, 0, +1
            nn.Conv1d(c, c, 3, stride=1, padding=1), nn.ReLU(),      # stride 1
            nn.Conv1d(c, c, 2, stride=1, padding=0, bias=False),     # 5 → 4: no slab form, im2col
        )
        self.head = nn.Linear(4 * c, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def test_slab_convolutions_give_each_models_own_losses_and_gradients(monkeypatch):
    """The 1-D convolutions without a patch matrix (vectorised._SlabConv1d) compute each model's forward and
    gradients: in float64 to 1e-10 of the model itself, in float32 to vmap's tolerance."""
    from depl.train.engine import vectorised

    used = []
    apply = vectorised._SlabConv1d.apply
    monkeypatch.setattr(vectorised._SlabConv1d, "apply", lambda *a: used.append(a[0].shape) or apply(*a))
    torch.manual_seed(1)
    models = [_Strided1d() for _ in range(3)]
    x, y = torch.randn(3, 6, 1, 40), torch.randint(0, 10, (3, 6))
    doubles = [_Strided1d().double() for _ in range(3)]
    for d, m in zip(doubles, models):
        d.load_state_dict({k: v.double() for k, v in m.state_dict().items()})
    stack = Stack(doubles, "gemm")
    loss, grads = _loss_and_grads(stack, x.double(), y)
    assert len(used) == 3   # the three middle convolutions; the first (1 channel) and last (5 → 4) by im2col
    w = stack.trainable()["features.2.weight"]     # (S, O, C, k) in memory as (S, k, C, O)
    assert w.shape == (3, 8, 8, 3) and w.stride() == (192, 1, 8, 64)
    plain_loss, plain_grads = _loss_and_grads(stack, x.double(), y, laid_out=False)
    torch.testing.assert_close(plain_loss, loss, rtol=0, atol=1e-12)
    for k in grads:
        torch.testing.assert_close(plain_grads[k], grads[k], rtol=0, atol=1e-12)
    for i, m in enumerate(doubles):
        own = torch.nn.functional.cross_entropy(m(x[i].double()), y[i])
        own.backward()
        assert float(loss[i]) == pytest.approx(float(own.detach()), abs=1e-10)
        for k, p in m.named_parameters():
            torch.testing.assert_close(grads[k][i], p.grad, rtol=0, atol=1e-10)
    (lg, gg), (lv, gv) = _loss_and_grads(Stack(models, "gemm"), x, y), _loss_and_grads(Stack(models, "vmap"), x, y)
    torch.testing.assert_close(lg, lv, rtol=1e-5, atol=1e-6)
    for k in gv:
        torch.testing.assert_close(gg[k], gv[k], rtol=1e-4, atol=1e-6)


def test_a_stack_keeps_its_freed_memory_for_the_next_step():
    """glibc's malloc is told to keep freed blocks (vectorised.keep_heap): a step's activations are not faulted in
    afresh every step.  This machine's Python runs on glibc (Linux)."""
    from depl.train.engine import vectorised

    Stack([build_net("cnn1d", 8, (1, 40), 10) for _ in range(2)])
    assert vectorised._heap_kept and vectorised.keep_heap()


def test_a_flatten_keeps_channels_last_order_and_its_consumers_see_pytorchs():
    """A flatten of channels-last activations is a view in their order (vectorised.FLAT_CL): as the net's output
    it is given back in PyTorch's channels-first order, and a linear layer reads it with its columns reordered."""
    torch.manual_seed(2)
    plain = nn.Sequential(nn.Conv1d(1, 8, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten())
    head = nn.Sequential(nn.Conv1d(1, 8, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(), nn.ReLU(),
                         nn.Linear(8 * 5, 10))
    x = torch.randn(2, 3, 1, 10, dtype=torch.float64)
    for net in (plain, head):
        models = [copy.deepcopy(net).double() for _ in range(2)]
        for m in models:
            for p in m.parameters():
                nn.init.normal_(p)
        stack = Stack(models, "gemm")
        params = stack.trainable()
        out = stack.forward(params, stack.buffers, x)
        out.sum().backward()
        for i, m in enumerate(models):
            own = m(x[i])
            torch.testing.assert_close(out[i], own, rtol=0, atol=1e-10)
            own.sum().backward()
            for k, p in m.named_parameters():
                torch.testing.assert_close(params[k].grad[i], p.grad, rtol=0, atol=1e-10)


def test_fashion_smalls_versions_train_as_stacks_on_the_gemm_kernels():
    """fashion-small's runs draw their own data of one size (data_subset): their seeds stack (the automatic choice
    measures stacks for them), and every version of its net — full, pruned 0.5 and 0.75 — has the batched-GEMM
    form.  (Built on arrays of Fashion-MNIST's shape: no file is read.)"""
    import numpy as np

    from depl.scenario import load_scenario
    from depl.train.engine.autochoice import candidates_for
    from depl.train.task.data import DataSpec, Source
    from depl.train.engine.federation import Job, TrainOptions, version_specs
    from depl.train.task.prune import build_version

    s = load_scenario("fashion-small")
    shape = Source(np.zeros((4, 1, 28, 28), np.float32), np.zeros(4, np.int64), np.zeros((2, 1, 28, 28), np.float32),
                   np.zeros(2, np.int64))
    versions = version_specs(s, shape, [m.name for m in s.models])
    for name, v in versions.items():
        assert Stack([build_version(v, seed) for seed in (0, 1)], "gemm").gemm is not None, name
    data = DataSpec("fashion-mnist", ((0.0, 1.0),), draws=s.training.data_draw, subset=s.training.data_subset)
    job = Job(data, versions, {c.name: c.nodes for c in s.clusters}, [(1, "full", "edge")], TrainOptions.of(s.training))
    assert job.stacks and any(c.seed_batch > 1 for c in candidates_for(job, 32, cores=2))
