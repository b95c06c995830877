"""Keep the folder a run is launched from off the import path of every Ray worker.

The CANN 样例's habit is to run the launchers from ``verl/recipe/retool``, a folder holding verl's own
``retool.py`` (and, elsewhere, ``reward.py``, ``tool.py``; a verl checkout's root holds ``verl/``). A module found
there first would be imported instead of the recipe's package or the installed verl. ``scripts/launch.sh`` exports
``PYTHONSAFEPATH=1``, which keeps the working directory off ``sys.path`` in every process it starts and their
children (``python -m``, torchrun's ranks); Ray does not read it: its driver sends its working directory to every
worker of the job (on every node), which puts it first on ``sys.path`` before running the worker's first task.

``undo_driver_paths`` is the Ray runtime env's ``worker_process_setup_hook`` (set by ``scripts/launch.sh`` in the
resolved config, so verl's workers and the node check's get it). It runs in each worker before its first task:
it lets Ray apply the job's paths now (Ray does that once per worker) and takes back out the ones Ray added. The
worker's working directory is left as it is, so relative paths mean what they mean in the launch folder.
"""

from __future__ import annotations

import sys

HOOK = "retool.launch_path.undo_driver_paths"


def undo_driver_paths() -> None:
    from ray import _raylet
    from ray._private.worker import global_worker

    added = list(global_worker.core_worker.get_job_config().py_driver_sys_path)
    _raylet.maybe_initialize_job_config()  # idempotent: the worker's first task finds it done
    for path in added:
        if path in sys.path:
            sys.path.remove(path)  # the first occurrence: the one Ray put in front
