import signal
import subprocess
import sys
import time
from pathlib import Path

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


def test_a_folder_that_cannot_be_written_is_named_with_what_to_do(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from workflow_helpers import immutable_folder

    results = tmp_path / "results"
    results.mkdir()
    chattr = immutable_folder(results)
    try:
        with pytest.raises(runlock.ResultsNotWritableError) as refused:
            runlock.acquire(results)
        assert str(refused.value) == (
            f"{results}: not writable (Operation not permitted: {results}/.rewardloop.lock): a run writes its lock, "
            f"results and logs there; make it writable again (chmod -R u+w {results}), or copy the run and work in "
            "the copy")
        assert runlock.is_free(results)  # probing needs no write access
    finally:
        chattr("-i")
