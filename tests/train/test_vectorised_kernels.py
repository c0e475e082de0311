"""The stack's batched-GEMM kernels compute what vmap computes, and nets without that form stay on vmap."""

import pytest
import torch
from torch import nn

from depl.train.federation import job_from_plan
from depl.train.nets import build_net
from depl.train.vectorised import Stack, per_seed_mean_ce, walk_plan_stack
from trainkit import SWITCH_PLAN, make_plan


def _loss_and_grads(stack: Stack, x: torch.Tensor, y: torch.Tensor):
    params = {k: v.clone().requires_grad_() for k, v in stack.params.items()}
    loss = per_seed_mean_ce(stack.forward(params, stack.buffers, x), y)
    loss.sum().backward()
    return loss.detach(), {k: p.grad for k, p in params.items()}


@pytest.mark.parametrize("net,shape", [("cnn1d", (1, 40)), ("cnn2d", (1, 8, 8)), ("alexnet", (3, 32, 32))])
def test_gemm_kernels_give_vmaps_losses_and_gradients(net, shape):
    torch.manual_seed(0)
    models = [build_net(net, 4, shape, 10) for _ in range(3)]
    gemm, vmap = Stack(models, "gemm"), Stack(models, "vmap")
    assert gemm.gemm is not None and vmap.gemm is None
    x, y = torch.randn(3, 6, *shape), torch.randint(0, 10, (3, 6))
    (lg, gg), (lv, gv) = _loss_and_grads(gemm, x, y), _loss_and_grads(vmap, x, y)
    torch.testing.assert_close(lg, lv, rtol=1e-5, atol=1e-6)
    for k in gv:
        torch.testing.assert_close(gg[k], gv[k], rtol=1e-4, atol=1e-6)
    shared = torch.randn(5, *shape)  # the test pass: one input seen by every model
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
