"""The pool's forkserver removes the pool's directory when it ends.

Imported by the forkserver only, first of the modules it preloads (``parallel``).
Workers remove the directory when the run that started them dies
(``lifetime.exit_with_parent``), but a run killed after it started its forkserver
and before any worker was forked has no worker; its forkserver ends then too
(every process that could ask it for a worker is gone), and this is what runs.
Anywhere else it is harmless: the directory it names is the pool's own, which the
process that made it removes at exit anyway.
"""

from __future__ import annotations

import atexit
import os
import shutil
from multiprocessing import forkserver

from .parallel import POOL_DIR_PREFIX


def _remove_pool_dir() -> None:
    address = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_address", None)
    if not isinstance(address, str):  # never started, or an abstract socket: nothing on disk
        return
    directory = os.path.dirname(address)
    if os.path.basename(directory).startswith(POOL_DIR_PREFIX):
        shutil.rmtree(directory, ignore_errors=True)


atexit.register(_remove_pool_dir)
