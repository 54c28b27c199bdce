"""A small subset of PyTorch's device-generic test machinery run against ``trn``.

``instantiate_device_type_tests(..., only_for=("privateuse1",))`` generates ``*_trn_<dtype>``
tests through ``PrivateUse1TestBase``. The device is registered (tests/device/conftest.py)
before ``torch.testing._internal.common_utils`` is imported, since device lists are computed then.
"""

import pytest

pytest.importorskip("expecttest")  # torch.testing._internal needs it (see the test extra)

import torch  # noqa: E402
from torch.testing._internal.common_device_type import (  # noqa: E402
    dtypes,
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.common_utils import TestCase  # noqa: E402

_COMPARE = {"add", "sub", "mul", "neg", "mm", "addmm", "sum", "mean", "softmax", "nn.functional.relu", "abs",
            "exp", "where", "cat", "transpose", "index_select", "clamp", "matmul", "bmm", "cumsum"}


class TestTrnCompareCpu(TestCase):
    """Like torch's ``TestCommon.test_compare_cpu``: samples made on the device, compared with the CPU."""

    @ops([o for o in op_db if o.name in _COMPARE and not o.variant_test_name],
         allowed_dtypes=(torch.float32, torch.bfloat16))
    def test_compare_cpu(self, device, dtype, op):
        self.assertEqual(torch.device(device).type, "trn")
        for i, sample in enumerate(op.sample_inputs(device, dtype)):
            if i >= 6:
                break
            cpu_sample = sample.transform(lambda x: x.detach().to("cpu") if isinstance(x, torch.Tensor) else x)
            actual = op(sample.input, *sample.args, **sample.kwargs)
            expected = op(cpu_sample.input, *cpu_sample.args, **cpu_sample.kwargs)
            tol = {"atol": 1e-2, "rtol": 1.6e-2} if dtype == torch.bfloat16 else {"atol": 1e-5, "rtol": 1e-5}
            self.assertEqual(actual, expected, exact_device=False, **tol)


class TestTrnBasics(TestCase):
    """Plain device-generic tests, instantiated for ``trn``."""

    @dtypes(torch.float32, torch.bfloat16, torch.int32)
    def test_add_broadcast_and_alpha(self, device, dtype):
        a = torch.arange(12, device=device).reshape(3, 4).to(dtype)
        b = torch.arange(4, device=device).to(dtype)
        self.assertEqual((a + b).cpu(), a.cpu() + b.cpu())
        self.assertEqual(torch.add(a, b, alpha=2).cpu(), torch.add(a.cpu(), b.cpu(), alpha=2))
        self.assertEqual((a * 3).cpu(), a.cpu() * 3)

    def test_views_alias(self, device):
        x = torch.zeros(3, 4, device=device)
        x.t()[1].fill_(2)
        x[2, :].add_(1)
        ref = torch.zeros(3, 4)
        ref.t()[1].fill_(2)
        ref[2, :].add_(1)
        self.assertEqual(x, ref, exact_device=False)
        self.assertTrue(x.view(-1)._base is x)

    def test_copy_and_dtype_conversions(self, device):
        x = torch.randn(5, 6)
        for dt in (torch.float16, torch.bfloat16, torch.int32, torch.float64):
            self.assertEqual(x.to(device, dt).cpu(), x.to(dt))

    def test_device_properties(self, device):
        self.assertEqual(torch.empty(2, device=device).device.type, "trn")
        self.assertEqual(torch.trn.device_count(), 1)


instantiate_device_type_tests(TestTrnCompareCpu, globals(), only_for=("privateuse1",))
instantiate_device_type_tests(TestTrnBasics, globals(), only_for=("privateuse1",))
