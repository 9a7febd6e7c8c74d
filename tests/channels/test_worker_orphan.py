"""A channel process that starts after its daemon is gone ends at once (issue 11: channels
must not outlive their daemon). The daemon's pid comes on the command line, so the check
does not depend on when the process reads its parent."""

from __future__ import annotations

import os
import subprocess
import sys

from safemon.channels.worker import ORPHAN_EXIT


def test_a_channel_whose_daemon_is_not_its_parent_exits_before_reading_its_config() -> None:
    # Our own parent is not the spawned process's parent: as if the daemon had died and
    # the process had been re-parented before it ran. Nothing is written to stdin.
    proc = subprocess.run(
        [sys.executable, "-m", "safemon.channels.worker", "--channel", "c0", "--incarnation",
         "1", "--epoch", "0", "--daemon-pid", str(os.getppid())],
        stdin=subprocess.PIPE, capture_output=True, timeout=60,
    )
    assert proc.returncode == ORPHAN_EXIT, proc.stderr.decode()[-2000:]
