"""core/signals.py, the one owner of stop signals: Ctrl-C and SIGTERM raise
KeyboardInterrupt within a block and are recorded, so a stop whose
KeyboardInterrupt was swallowed on the way (importlib's lock callback, during a
verb's imports) is still seen before a commit (`view --export`'s rename)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tension.core.signals import raise_if_stopped, stops_raise


def _signal_self(sig: int) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(0.05)  # the handler runs at the next bytecode boundary, here at the latest


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_whose_interrupt_was_swallowed_is_still_seen_before_the_commit(sig):
    before = signal.getsignal(sig)
    with stops_raise(signal.SIGINT, signal.SIGTERM):
        raise_if_stopped()  # nothing received yet: no stop
        try:
            _signal_self(sig)
        except KeyboardInterrupt:
            pass  # swallowed, as an "Exception ignored in …" callback does
        else:
            pytest.fail("the signal raised no KeyboardInterrupt")
        with pytest.raises(KeyboardInterrupt):
            raise_if_stopped()
    assert signal.getsignal(sig) is before  # the handler before it is put back
    raise_if_stopped()  # outside a block: nothing to obey
    with stops_raise(signal.SIGINT):
        raise_if_stopped()  # a new block starts without the old stop


def test_off_the_main_thread_a_block_installs_nothing():
    seen = []

    def work():
        with stops_raise(signal.SIGTERM):
            seen.append(signal.getsignal(signal.SIGTERM))
            raise_if_stopped()

    before = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen == [before]
