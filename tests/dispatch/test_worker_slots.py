"""The machine-wide cap's slots (``worker_slots``): real flocks, a real forked holder, and what
a planted file gets."""

import os
import signal

import pytest

from dispatcher.core.errors import BridgeError
from dispatcher.dispatch.worker_slots import slots_dir, slots_in_use, take_slot


def test_slots_run_out_at_the_cap_and_come_back_when_their_holder_ends(tmp_path):
    held = [take_slot(tmp_path, 2), take_slot(tmp_path, 2)]
    assert None not in held and take_slot(tmp_path, 2) is None
    assert slots_in_use(tmp_path) == 2
    # Handed to a child, as the listener hands one to its supervisor: the parent's close keeps it held.
    child = os.fork()
    if child == 0:
        signal.pause()
        os._exit(0)
    os.close(held[0])
    assert take_slot(tmp_path, 2) is None
    os.kill(child, signal.SIGKILL)  # however the holder ends, the kernel frees the slot
    os.waitpid(child, 0)
    freed = take_slot(tmp_path, 2)
    assert freed is not None and take_slot(tmp_path, 3) is not None  # a raised cap adds slots
    for fd in (held[1], freed):
        os.close(fd)


@pytest.mark.parametrize("plant", ["symlink", "fifo"])
def test_a_planted_slot_file_is_refused_not_followed(tmp_path, plant):
    target = tmp_path / "elsewhere"
    target.write_text("")
    slots_dir(tmp_path).mkdir(mode=0o700)
    slot = slots_dir(tmp_path) / "0.lock"
    if plant == "symlink":
        slot.symlink_to(target)
    else:
        os.mkfifo(slot, 0o600)
    with pytest.raises((BridgeError, OSError)):
        take_slot(tmp_path, 1)
    assert target.read_text() == ""
