import signal
import subprocess
import sys
import time

import pytest

from rewardloop.runtime import runlock

HOLDER = "import sys, time; from rewardloop.runtime import runlock; runlock.acquire(sys.argv[1]); print('held', flush=True); time.sleep(60)"


def test_second_run_is_refused_and_a_killed_holder_releases(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(runlock.RunLockedError, match=rf"another rewardloop run is active .*pid {holder.pid}"):
            runlock.acquire(tmp_path)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    deadline = time.time() + 5
    while True:  # the kernel drops the flock with the process
        try:
            runlock.acquire(tmp_path)
            break
        except runlock.RunLockedError:
            assert time.time() < deadline
            time.sleep(0.05)
