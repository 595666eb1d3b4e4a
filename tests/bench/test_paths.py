"""The bench's backends: a mirror target (shadow, baseline) runs at idle priority."""

from __future__ import annotations

import os
from pathlib import Path

from _paths import Layout, backend
from _procs import free_port


def test_mirror_targets_run_at_idle_priority_and_the_primary_does_not(tmp_path: Path) -> None:
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    layout = Layout(relay_cpus=cpus[:1], load_cpus=cpus[-1:], log_dir=tmp_path)
    with backend(layout, "inline", "primary", free_port(), 0.0, 0.0) as primary, \
            backend(layout, "inline", "shadow", free_port(), 0.0, 0.0,
                    mirror_target=True) as shadow:
        assert os.sched_getscheduler(shadow.pid) == os.SCHED_IDLE
        assert os.sched_getscheduler(primary.pid) == os.SCHED_OTHER
        # Still pinned to the load CPUs: chrt and taskset both exec the same process.
        assert os.sched_getaffinity(shadow.pid) == set(layout.load_cpus)
