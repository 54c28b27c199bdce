"""``module.to("trn")`` / ``.cpu()`` / ``.trn()`` keep Parameter objects: tied weights stay tied."""

import torch
import torch.nn as nn


def _tied() -> nn.ModuleList:
    a, b = nn.Linear(4, 4), nn.Linear(4, 4)
    b.weight = a.weight
    return nn.ModuleList([a, b])


def test_tied_weights_survive_to_trn_and_back():
    m = _tied()
    w = m[0].weight
    m.to("trn")
    assert m[0].weight is m[1].weight is w
    assert w.device.type == "trn"
    m.cpu()
    assert m[0].weight is m[1].weight is w and w.device.type == "cpu"
    m.trn()
    assert m[0].weight is m[1].weight is w and w.device.type == "trn"


def test_optimizer_made_before_the_move_trains_the_moved_module():
    torch.manual_seed(0)
    ref = _tied()
    m = _tied()
    m.load_state_dict(ref.state_dict())
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)  # before .to("trn")
    m.to("trn")
    x = torch.randn(3, 4)
    for mod, o, xx in ((ref, opt_ref, x), (m, opt, x.to("trn"))):
        o.zero_grad()
        mod[1](mod[0](xx)).square().sum().backward()
        o.step()
    torch.testing.assert_close(m[0].weight.cpu(), ref[0].weight, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(m[1].bias.cpu(), ref[1].bias, rtol=1e-5, atol=1e-6)


def test_cpu_only_conversions_unchanged():
    m = _tied()
    w = m[0].weight
    m.to(torch.float64)
    assert m[0].weight is m[1].weight is w and w.dtype == torch.float64
    assert not torch.__future__.get_swap_module_params_on_conversion()


def test_conversions_that_stay_on_trn_keep_torchs_path():
    """A dtype or memory-format change of a trn module sets .data (no swap): it works while an autograd graph
    still holds the parameters (a swap refuses that), and the Parameter objects survive as on the CPU."""
    conv = torch.nn.Conv2d(4, 4, 3, 1).to("trn")
    w = conv.weight
    out = conv(torch.randn(2, 4, 6, 6).to("trn"))  # its graph holds the weight
    conv.to(memory_format=torch.channels_last)
    assert conv.weight is w and w.is_contiguous(memory_format=torch.channels_last)
    conv.to(torch.bfloat16)
    assert conv.weight is w and w.dtype == torch.bfloat16 and w.device.type == "trn"
    conv.trn()
    assert conv.weight is w
    out.sum().backward()  # the old graph still runs
    del out
