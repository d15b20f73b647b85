"""The env thread's queue (`Jobs`): the items in a deque, a byte through a pipe for each (see
`core/env_thread.py`). The loop puts, the env thread gets; `None` ends the thread, which closes
the pipe's reading end as it goes (the loop closed the writing end after the `None`).
"""

from __future__ import annotations

import collections
import os
from typing import Any


class Jobs:
    """One env thread's queue of env calls. `None` ends the thread."""

    def __init__(self) -> None:
        self.items: collections.deque[Any] = collections.deque()
        self._read, self._write = os.pipe()
        self._pid = os.getpid()  # a forked child has the pipe, not the thread reading it

    def put(self, item: Any) -> None:
        self.items.append(item)
        os.write(self._write, b"\0")  # the interpreter's lock is let go, then the thread woken

    def get(self) -> Any:
        if not os.read(self._read, 1):
            return None  # the writing end closed with nothing left to read
        return self.items.popleft()

    def end(self) -> None:
        """The loop's side: the thread ends once it has served what was put before."""
        if self.forked():  # a forked child's copy: the parent's thread reads it
            os.close(self._write)
            os.close(self._read)
            return
        try:
            self.put(None)
        except OSError:  # BrokenPipeError: the thread has ended already
            pass
        finally:
            os.close(self._write)

    def forked(self) -> bool:
        return self._pid != os.getpid()

    def close_reading_end(self) -> None:
        os.close(self._read)
