"""torch.trn streams and events: names for the device's one synchronous queue (what FSDP2 asks for)."""

import threading

import torch

import trnlang.device  # noqa: F401 - registers trn


def test_stream_context_selects_the_current_stream_per_thread() -> None:
    s = torch.trn.Stream(priority=-1)
    default = torch.trn.current_stream()
    assert default is torch.trn.default_stream() and s is not default
    seen = []
    with torch.trn.stream(s):
        assert torch.trn.current_stream() is s
        t = threading.Thread(target=lambda: seen.append(torch.trn.current_stream()))
        t.start()
        t.join()
        with torch.trn.stream(None):
            assert torch.trn.current_stream() is s
    assert torch.trn.current_stream() is default and seen == [default]
    assert s.device == torch.device("trn", 0) and s.priority == -1


def test_events_are_complete_and_waits_return() -> None:
    s = torch.trn.Stream()
    x = torch.ones(4, device="trn")
    with torch.trn.stream(s):
        y = x * 2
        e = s.record_event()
    torch.trn.current_stream().wait_event(e)
    torch.trn.current_stream().wait_stream(s)
    assert e.query() and s.query() and isinstance(e, torch.trn.Event)
    assert y.cpu().tolist() == [2.0] * 4
