"""The ServerApp on a thread of its own, run one step at a time by the simulated clock.

A ServerApp's ``main`` is ordinary blocking code: it calls its ``Grid`` and waits for the answer. Here it runs on a
second thread whose every Grid call becomes a request handed to the simulator's server process (on the thread
that drives SimPy), which answers it at the simulated instant the answer is ready. Exactly one of the two threads
runs at any moment (each waits for the other's hand-over), so a run is as deterministic as single-threaded code.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class AppStopped(BaseException):
    """Raised inside the ServerApp's pending Grid call to end it early (a stop request, an error elsewhere)."""


@dataclass
class Finished:
    """The ServerApp returned (``error`` None) or raised ``error``."""

    error: BaseException | None


@dataclass
class _Raise:
    error: BaseException


class AppThread:
    def __init__(self, target: Callable[[], None]) -> None:
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, args=(target,), name="flower-serverapp", daemon=True)
        self.misuse: str | None = None  # a Grid call from another thread than the app's: the run's error

    def _main(self, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as e:  # noqa: BLE001 - handed to the simulator's thread, which reports it
            self._requests.put(Finished(e))
        else:
            self._requests.put(Finished(None))

    # ------------------------------------------------------------ the ServerApp's side

    def call(self, request: Any) -> Any:
        """Hand ``request`` to the simulator and wait for its answer (called on the app's thread; from any other,
        the call raises there and the run ends with ``misuse``: answers must come in one order every run)."""
        if threading.current_thread() is not self._thread:
            self.misuse = (
                f"algorithm.server_app: the app called its Grid from a thread of its own "
                f"({threading.current_thread().name!r}); iotfl-sim runs a ServerApp on one thread, so that every run "
                "of a scenario gives the same numbers: make the Grid calls from the thread that runs the app"
            )
            raise RuntimeError(self.misuse)
        self._requests.put(request)
        answer = self._answers.get()
        if isinstance(answer, _Raise):
            raise answer.error
        return answer

    # ------------------------------------------------------------ the simulator's side

    def start(self) -> Any:
        """Start the app; its first request (or ``Finished``)."""
        self._thread.start()
        return self._requests.get()

    def answer(self, value: Any) -> Any:
        """Answer the pending request; the app's next one (or ``Finished``)."""
        self._answers.put(value)
        return self._requests.get()

    def stop(self) -> Finished:
        """End the app at its pending request (``AppStopped`` raised there) and wait for it to unwind."""
        request = self.answer(_Raise(AppStopped()))
        while not isinstance(request, Finished):  # an app that catches it and calls again is stopped again
            request = self.answer(_Raise(AppStopped()))
        self._thread.join()
        return request
