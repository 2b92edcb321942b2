"""Tests of poptorch_shim.optim: PopTorch's optimizers train exactly like the
torch optimizers they extend, LAMB matches a reference written out here, the
PopTorch-only arguments are validated and do what PopTorch says, and the
optimizer-state accounting the memory model uses counts the right tensors."""
import copy
import math
import pickle
import warnings
from collections.abc import Callable

import pytest
import torch

import poptorch_shim
from poptorch_shim._optim.state import state_slots
from poptorch_shim.optim import (
    LAMB,
    SGD,
    Adam,
    AdamW,
    RMSprop,
    VariableAttributes,
    accumulator_bytes,
    check_ipu_optimizer,
    optimizer_state_bytes,
)


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def train(make: Callable, steps: int = 5) -> list[torch.Tensor]:
    """Weights of ``tiny_model`` after ``steps`` updates by ``make(params)``."""
    model = tiny_model()
    opt = make(model.parameters())
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(16, 4, generator=generator), torch.randn(16, 2, generator=generator)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def assert_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


MATCHES = [
    (SGD, torch.optim.SGD, dict(lr=0.1)),
    (SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    (Adam, torch.optim.Adam, dict()),
    (Adam, torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1)),
    (AdamW, torch.optim.AdamW, dict()),
    (AdamW, torch.optim.AdamW, dict(lr=0.01, eps=1e-6, weight_decay=0.05)),
    (RMSprop, torch.optim.RMSprop, dict()),
    (RMSprop, torch.optim.RMSprop, dict(lr=0.01, momentum=0.5, centered=True,
                                        weight_decay=0.01)),
]


@pytest.mark.parametrize("ours, theirs, kwargs", MATCHES)
@pytest.mark.parametrize("loss_scaling", [None, 1024.0, 3.0])
def test_trains_exactly_like_torch(ours, theirs, kwargs, loss_scaling):
    extra = {} if loss_scaling is None else {"loss_scaling": loss_scaling}
    assert_same(train(lambda p: ours(p, **kwargs, **extra)),
                train(lambda p: theirs(p, **kwargs)))


@pytest.mark.parametrize("ours, theirs", [(SGD, torch.optim.SGD), (Adam, torch.optim.Adam),
                                          (AdamW, torch.optim.AdamW),
                                          (RMSprop, torch.optim.RMSprop)])
def test_defaults_are_torch_defaults(ours, theirs):
    params = [torch.nn.Parameter(torch.zeros(2))]
    mine, reference = ours(params, lr=0.5).defaults, theirs(params, lr=0.5).defaults
    assert {k: mine[k] for k in reference} == reference
    assert ours(params, lr=0.5).loss_scaling == 1.0


def test_adamw_weight_decay_default_and_lamb_defaults():
    params = [torch.nn.Parameter(torch.zeros(2))]
    assert AdamW(params).defaults["weight_decay"] == 1e-2
    lamb = LAMB(params)
    assert lamb.defaults == dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                                 max_weight_norm=65500.0)
    assert lamb.bias_correction is True and lamb.accum_type == torch.float32


def test_sgd_requires_lr():
    with pytest.raises(TypeError, match="lr"):
        SGD([torch.nn.Parameter(torch.zeros(2))])


def test_loss_scaling_cancels_exactly_for_powers_of_two():
    """The documented reason the shim applies no scaling: scaling the loss by
    2**k and the gradients back by 2**-k changes no bit in FP32."""
    model, x = tiny_model(), torch.randn(8, 4)
    model(x).square().mean().backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    (model(x).square().mean() * 1024.0).backward()
    assert_same(plain, [p.grad / 1024.0 for p in model.parameters()])


def lamb_reference(w, grads, lr, betas, eps, wd, bias_correction, max_weight_norm):
    """LAMB as in You et al. 2019, with PopTorch's phi(z) = min(z, max_weight_norm)."""
    w, m, v = w.clone().double(), torch.zeros_like(w).double(), torch.zeros_like(w).double()
    for t, g in enumerate(grads, start=1):
        g = g.double()
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        m_hat, v_hat = (m / (1 - betas[0] ** t), v / (1 - betas[1] ** t)) \
            if bias_correction else (m, v)
        u = m_hat / (v_hat.sqrt() + eps) + wd * w
        phi = min(w.norm().item(), max_weight_norm)
        trust = 1.0 if phi == 0 or u.norm().item() == 0 else phi / u.norm().item()
        w = w - lr * trust * u
    return w.float()


@pytest.mark.parametrize("bias_correction", [True, False])
@pytest.mark.parametrize("max_weight_norm", [None, 0.5, 0.0])  # 0.0: trust ratio 1
@pytest.mark.parametrize("steps", [1, 3])
def test_lamb_matches_reference(bias_correction, max_weight_norm, steps):
    torch.manual_seed(3)
    w0 = torch.randn(5, 3)
    grads = [torch.randn(5, 3) for _ in range(steps)]
    param = torch.nn.Parameter(w0.clone())
    opt = LAMB([param], lr=0.02, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1,
               bias_correction=bias_correction, max_weight_norm=max_weight_norm)
    for g in grads:
        param.grad = g.clone()
        opt.step()
    expected = lamb_reference(w0, grads, 0.02, (0.8, 0.95), 1e-6, 0.1, bias_correction,
                              65500.0 if max_weight_norm is None else max_weight_norm)
    torch.testing.assert_close(param.detach(), expected, rtol=1e-5, atol=1e-6)


def one_lamb_step(w0: torch.Tensor, grad: torch.Tensor, **kwargs) -> torch.Tensor:
    param = torch.nn.Parameter(w0.clone())
    param.grad = grad.clone()
    LAMB([param], **kwargs).step()
    return param.detach()


def test_lamb_trust_ratio_is_one_for_zero_weights():
    # w = 0: ||w|| = 0, so the step is lr * u with u = m_hat / (sqrt(v_hat) + eps).
    grad = torch.tensor([1.0, -2.0, 4.0])
    w = one_lamb_step(torch.zeros(3), grad, lr=0.1, eps=0.0)
    torch.testing.assert_close(w, -0.1 * grad.sign())


def test_lamb_trust_ratio_is_one_for_zero_update():
    # No gradient signal and no weight decay: u = 0, the weights stay put.
    w0 = torch.tensor([3.0, 4.0])
    assert torch.equal(one_lamb_step(w0, torch.zeros(2), lr=0.1, weight_decay=0.0), w0)


def test_lamb_trust_ratio_uses_clamped_weight_norm():
    # ||w|| = 5, u = sign(g) = [1, 1] (||u|| = sqrt 2); clamp 5 -> 2.
    w0, grad = torch.tensor([3.0, 4.0]), torch.tensor([0.5, 0.5])
    free = one_lamb_step(w0, grad, lr=0.1, eps=0.0, weight_decay=0.0, max_weight_norm=math.inf)
    clamped = one_lamb_step(w0, grad, lr=0.1, eps=0.0, weight_decay=0.0, max_weight_norm=2.0)
    torch.testing.assert_close(w0 - free, torch.full((2,), 0.1 * 5 / math.sqrt(2)))
    torch.testing.assert_close(w0 - clamped, torch.full((2,), 0.1 * 2 / math.sqrt(2)))


def test_lamb_max_weight_norm_per_group():
    a, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    opt = LAMB([{"params": [a]}, {"params": [b], "max_weight_norm": 1.0}])
    assert [g["max_weight_norm"] for g in opt.param_groups] == [65500.0, 1.0]


def test_every_poptorch_optimizer_is_a_poptorch_optim_optimizer():
    """Libraries tell PopTorch's optimizers from torch's by PopTorch's base class."""
    params = [torch.nn.Parameter(torch.zeros(2))]
    for cls in (SGD, Adam, AdamW, RMSprop, LAMB):
        assert isinstance(cls(params, lr=0.1), poptorch_shim.optim.Optimizer)
    assert not isinstance(torch.optim.SGD(params, lr=0.1), poptorch_shim.optim.Optimizer)
    assert poptorch_shim.optim.Optimizer.__module__ == "poptorch_shim.optim"


def test_adamw_without_bias_correction():
    torch.manual_seed(4)
    w0, grads = torch.randn(6), [torch.randn(6) for _ in range(3)]
    param = torch.nn.Parameter(w0.clone())
    opt = AdamW([param], lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1,
                bias_correction=False)
    w, m, v = w0.double(), torch.zeros(6).double(), torch.zeros(6).double()
    for g in grads:
        param.grad = g.clone()
        opt.step()
        m, v = 0.9 * m + 0.1 * g.double(), 0.99 * v + 0.01 * g.double() ** 2
        w = w * (1 - 0.01 * 0.1) - 0.01 * m / (v.sqrt() + 1e-8)
    torch.testing.assert_close(param.detach(), w.float())


@pytest.mark.parametrize("centered", [False, True])
@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_rmsprop_tf_variant(centered, momentum):
    torch.manual_seed(5)
    w0, grads = torch.randn(6), [torch.randn(6) for _ in range(3)]
    param = torch.nn.Parameter(w0.clone())
    opt = RMSprop([param], lr=0.01, alpha=0.9, eps=1e-3, momentum=momentum,
                  centered=centered, use_tf_variant=True)
    w, ms, mg, buf = w0.double(), torch.ones(6).double(), torch.zeros(6).double(), 0.0
    for g in grads:
        param.grad = g.clone()
        opt.step()
        g = g.double()
        ms = 0.9 * ms + 0.1 * g * g
        mg = 0.9 * mg + 0.1 * g
        denom = (ms - mg * mg + 1e-3).sqrt() if centered else (ms + 1e-3).sqrt()
        buf = momentum * buf + 0.01 * g / denom
        w = w - buf
    torch.testing.assert_close(param.detach(), w.float())


def test_max_grad_norm_clips_the_global_norm():
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    opt = SGD([a, b], lr=1.0, max_grad_norm=1.0)
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([4.0])  # global norm 5
    opt.step()
    torch.testing.assert_close(torch.cat([a, b]).detach(), -torch.tensor([0.6, 0.0, 0.8]))
    a.grad, b.grad = torch.tensor([0.3, 0.0]), torch.tensor([0.4])  # below the limit
    opt.step()
    torch.testing.assert_close(torch.cat([a, b]).detach(), -torch.tensor([0.9, 0.0, 1.2]))


def test_step_with_closure_returns_loss_and_clips_its_gradients():
    param = torch.nn.Parameter(torch.tensor([0.0]))
    opt = Adam([param], lr=0.1, max_grad_norm=0.5)

    def closure():
        opt.zero_grad()
        loss = (param - 10.0).square().sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 100.0
    assert param.grad.item() == pytest.approx(-0.5)


def test_fp16_state_is_stored_at_fp16_precision():
    model = tiny_model()
    opt = Adam(model.parameters(), lr=0.01, first_order_momentum_accum_type=torch.float16)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 4)).sum().backward()
        opt.step()
    for state in opt.state.values():
        assert torch.equal(state["exp_avg"], state["exp_avg"].half().float())
        assert not torch.equal(state["exp_avg_sq"], state["exp_avg_sq"].half().float())


@pytest.mark.parametrize("make", [lambda p: SGD(p, lr=0.1, momentum=0.9), lambda p: LAMB(p),
                                  lambda p: AdamW(p, bias_correction=False)])
def test_lr_schedulers_drive_the_optimizers(make):
    param = torch.nn.Parameter(torch.ones(3))
    opt = make([param])
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    start = opt.param_groups[0]["lr"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "lr_scheduler.step() before optimizer.step()"
        for _ in range(2):
            param.grad = torch.ones(3)
            opt.step()
            scheduler.step()
    assert opt.param_groups[0]["lr"] == start / 4


def test_step_hooks_run_once():
    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)  # hooks torch's step too
    calls = []
    opt = SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    opt.register_step_pre_hook(lambda *args: calls.append("pre"))
    opt.register_step_post_hook(lambda *args: calls.append("post"))
    opt.step()
    assert calls == ["pre", "post"]


@pytest.mark.parametrize("value, shown", [(0, "got 0"), (-1.0, "got -1.0"),
                                           (float("nan"), "got nan"), ("2", "got '2'"),
                                           (True, "got True"), (float("inf"), "got inf")])
def test_loss_scaling_must_be_positive_and_finite(value, shown):
    with pytest.raises(ValueError, match=f"loss_scaling must be .*{shown}.*1.0 to disable"):
        SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1, loss_scaling=value)


def test_loss_scaling_setter_validates():
    opt = Adam([torch.nn.Parameter(torch.zeros(1))], loss_scaling=8.0)
    opt.loss_scaling = 16.0
    assert opt.loss_scaling == 16.0
    with pytest.raises(ValueError, match="loss_scaling must be a number greater than 0, got -2"):
        opt.loss_scaling = -2


ACCUM_ARGS = [(SGD, "accum_type"), (SGD, "velocity_accum_type"), (Adam, "accum_type"),
              (Adam, "first_order_momentum_accum_type"),
              (AdamW, "second_order_momentum_accum_type"),
              (RMSprop, "first_order_momentum_accum_type"),
              (LAMB, "second_order_momentum_accum_type")]


@pytest.mark.parametrize("cls, name", ACCUM_ARGS)
def test_accum_types_must_be_fp16_or_fp32(cls, name):
    params = [torch.nn.Parameter(torch.zeros(1))]
    assert getattr(cls(params, lr=0.1, **{name: torch.float16}), name) == torch.float16
    with pytest.raises(ValueError, match=f"{name} must be set to either torch.float16 or "
                       "torch.float32, not torch.bfloat16"):
        cls(params, lr=0.1, **{name: torch.bfloat16})


@pytest.mark.parametrize("make, message", [
    (lambda p: SGD(p, lr=0.1, max_grad_norm=0.0), "max_grad_norm must be a number greater "
     "than 0, got 0.0"),
    (lambda p: Adam(p, max_grad_norm=float("nan")), "max_grad_norm .* got nan"),
    (lambda p: LAMB(p, max_weight_norm=-1.0), r"max_weight_norm \(group 0\) .* got -1.0"),
    (lambda p: SGD(p, lr=0.1, use_combined_accum=True, velocity_scaling=0),
     r"velocity_scaling \(group 0\) .* got 0"),
    (lambda p: Adam(p, amsgrad=True), "Only non-amsgrad Adam/AdamW optimizers are supported"),
    (lambda p: AdamW(p, amsgrad=True), "Only non-amsgrad"),
])
def test_invalid_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make([torch.nn.Parameter(torch.zeros(1))])


def test_velocity_scaling_is_per_group_for_the_combined_variant_only():
    params = [torch.nn.Parameter(torch.zeros(1))]
    combined = SGD(params, lr=0.1, use_combined_accum=True, velocity_scaling=4.0)
    assert combined.defaults["velocity_scaling"] == 4.0
    assert combined.param_groups[0]["velocity_scaling"] == 4.0
    with pytest.warns(UserWarning, match="velocity_scaling value ignored"):
        separate = SGD(params, lr=0.1, velocity_scaling=4.0)
    assert "velocity_scaling" not in separate.defaults
    assert "velocity_scaling" not in separate.param_groups[0]


def test_combined_sgd_trains_like_torch_sgd():
    assert_same(train(lambda p: SGD(p, lr=0.1, momentum=0.9, use_combined_accum=True,
                                    velocity_scaling=8.0, loss_scaling=64.0)),
                train(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)))


def test_variable_attributes_follow_the_given_arguments():
    params = [torch.nn.Parameter(torch.zeros(1))]
    attrs = SGD(params, lr=0.1, momentum=0.9).variable_attrs
    assert not attrs.isConstant("lr") and not attrs.isConstant("momentum")
    assert attrs.isConstant("weight_decay") and attrs.isConstant("loss_scaling")
    attrs.markAsVariable("loss_scaling")
    attrs.markAsConstant("lr")
    assert not attrs.isConstant("loss_scaling") and attrs.isConstant("lr")
    assert not Adam(params, loss_scaling=2.0).variable_attrs.isConstant("loss_scaling")
    assert not LAMB(params, max_weight_norm=3.0).variable_attrs.isConstant("max_weight_norm")


def test_variable_attributes_reject_unknown_names():
    attrs = VariableAttributes(["lr"], ["lr", "momentum"])
    for method in (attrs.isConstant, attrs.markAsConstant, attrs.markAsVariable):
        with pytest.raises(ValueError, match=r"unknown attribute 'betas'.*\['lr', 'momentum'\]"):
            method("betas")


def test_copies_keep_the_poptorch_attributes():
    model = tiny_model()
    opt = LAMB(model.parameters(), lr=0.01, bias_correction=False, loss_scaling=32.0,
               first_order_momentum_accum_type=torch.float16)
    opt.variable_attrs.markAsVariable("eps")
    for clone in (copy.deepcopy(opt), pickle.loads(pickle.dumps(opt))):
        assert clone.loss_scaling == 32.0 and clone.bias_correction is False
        assert clone.first_order_momentum_accum_type == torch.float16
        assert not clone.variable_attrs.isConstant("eps")


@pytest.mark.parametrize("make", [lambda p: AdamW(p, lr=0.01, bias_correction=False),
                                  lambda p: LAMB(p, lr=0.01),
                                  lambda p: RMSprop(p, momentum=0.5, use_tf_variant=True)])
def test_state_dict_resumes_training_exactly(make):
    def one_step(model, opt):
        opt.zero_grad()
        model(torch.ones(2, 4)).square().sum().backward()
        opt.step()

    model = tiny_model()
    opt = make(model.parameters())
    one_step(model, opt)
    resumed_model = copy.deepcopy(model)
    resumed = make(resumed_model.parameters())
    resumed.load_state_dict(copy.deepcopy(opt.state_dict()))  # as if saved to disk
    one_step(model, opt)
    one_step(resumed_model, resumed)
    assert_same(list(model.parameters()), list(resumed_model.parameters()))


def params_of(*shapes) -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.zeros(shape)) for shape in shapes]


STATE_BYTES = [  # (optimizer, state bytes per FP32 weight element)
    (lambda p: torch.optim.SGD(p, lr=0.1), 0),
    (lambda p: SGD(p, lr=0.1), 0),
    (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), 4),
    (lambda p: SGD(p, lr=0.1, momentum=0.9), 4),
    (lambda p: SGD(p, lr=0.1, momentum=0.9, velocity_accum_type=torch.float16), 2),
    (lambda p: torch.optim.Adam(p), 8),
    (lambda p: torch.optim.AdamW(p), 8),
    (lambda p: Adam(p), 8),
    (lambda p: AdamW(p, first_order_momentum_accum_type=torch.float16), 6),
    (lambda p: LAMB(p), 8),
    (lambda p: LAMB(p, first_order_momentum_accum_type=torch.float16,
                    second_order_momentum_accum_type=torch.float16), 4),
    (lambda p: torch.optim.RMSprop(p), 4),
    (lambda p: RMSprop(p, momentum=0.9), 8),
    (lambda p: RMSprop(p, momentum=0.9, centered=True), 12),
    (lambda p: RMSprop(p, centered=True, second_order_momentum_accum_type=torch.float16), 6),
]


@pytest.mark.parametrize("make, per_element", STATE_BYTES)
def test_optimizer_state_bytes(make, per_element):
    params = params_of((3, 4), (5,))
    opt = make(params)
    assert optimizer_state_bytes(opt) == 17 * per_element
    assert optimizer_state_bytes(opt, params[1:]) == 5 * per_element


def test_state_bytes_match_what_torch_allocates():
    """For FP32 state the count equals the tensors a torch step really creates."""
    for make, _ in STATE_BYTES:
        params = params_of((3, 4), (5,))
        opt = make(params)
        if any(dtype == torch.float16 for group in opt.param_groups
               for dtype in state_slots(opt, group).values()):
            continue
        for p in params:
            p.grad = torch.ones_like(p)
        opt.step()
        allocated = sum(t.numel() * t.element_size() for s in opt.state.values()
                        for t in s.values() if torch.is_tensor(t) and t.dim() > 0)
        assert optimizer_state_bytes(opt) == allocated


def test_state_bytes_with_fp16_weights_use_the_declared_types():
    params = [torch.nn.Parameter(torch.zeros(10, dtype=torch.float16))]
    assert optimizer_state_bytes(Adam(params)) == 80
    assert optimizer_state_bytes(SGD(params, lr=0.1, momentum=0.9,
                                     use_combined_accum=True)) == 20


def test_accumulator_bytes():
    params = params_of((10,))
    assert accumulator_bytes(Adam(params)) == 40
    assert accumulator_bytes(Adam(params, accum_type=torch.float16)) == 20
    assert accumulator_bytes(torch.optim.SGD(params, lr=0.1)) == 40
    assert accumulator_bytes(SGD(params, lr=0.1, momentum=0.9, use_combined_accum=True)) == 0
    assert accumulator_bytes(SGD(params, lr=0.1, use_combined_accum=True)) == 40


def test_unsupported_optimizer_is_refused():
    opt = torch.optim.Adagrad(params_of((2,)))
    for check in (optimizer_state_bytes, accumulator_bytes, check_ipu_optimizer):
        with pytest.raises(ValueError, match="Unsupported optimizer type Adagrad"):
            check(opt)


@pytest.mark.parametrize("make, message", [
    (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
     "Nesterov momentum is currently not supported"),
    (lambda p: torch.optim.Adam(p, amsgrad=True), "Only non-amsgrad"),
    (lambda p: SGD(p, lr=0.1, maximize=True), "maximize=True is not supported"),
    (lambda p: RMSprop([{"params": p[:1]}, {"params": p[1:], "centered": True}]),
     r"'centered' attribute \(Group 0: False / Group 1: True\)"),
])
def test_check_ipu_optimizer(make, message):
    with pytest.raises(ValueError, match=message):
        check_ipu_optimizer(make(params_of((2,), (3,))))


def test_check_ipu_optimizer_accepts_supported_optimizers():
    for make, _ in STATE_BYTES:
        check_ipu_optimizer(make(params_of((2,))))
