"""The one shape every service reports its state in, so `up` and `status` print alike."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServiceStatus:
    """Whether a service answers, where, and under which pid (None when not ours)."""

    name: str
    running: bool
    address: str
    pid: int | None = None
    detail: str = ""

    def line(self) -> str:
        """A short human line such as `kafka     up at 127.0.0.1:9092 (pid 1234)`."""
        state = "up" if self.running else "down"
        pid = f" (pid {self.pid})" if self.pid else ""
        detail = f" - {self.detail}" if self.detail else ""
        return f"{self.name:<9} {state} at {self.address}{pid}{detail}"
