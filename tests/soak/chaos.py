"""The soak's chaos: faults at random on the workers, the beat and Redis."""

from __future__ import annotations

import random
import threading
import time

from tests.soak.processes import Service
from tests.soak.world import Loop, Settings, Tally


class Chaos(Loop):
    """Faults at random: SIGKILL and restart, SIGSTOP past the lease then SIGCONT, warm
    restarts, of the workers, the beat and Redis."""

    def __init__(self, services_: dict[str, Service], settings: Settings, rng: random.Random):
        super().__init__("chaos")
        self.services = services_
        self.rng = rng
        self.settings = settings
        self.faults = Tally()
        self.pending: list[tuple[float, str, Service]] = []  # (when, "start" | "resume", svc)
        self.restarts: list[threading.Thread] = []  # warm restarts under way
        self.next_fault = time.monotonic() + rng.uniform(3, 8)
        self.last_fault_at = 0.0

    def step(self) -> None:
        now = time.monotonic()
        for due in [p for p in self.pending if p[0] <= now]:
            self.pending.remove(due)
            self._undo(due[1], due[2])
        if now >= self.next_fault:
            self._fault()
            self.next_fault = now + self.rng.uniform(3, 9)
        self.halt.wait(0.1)

    def _undo(self, action: str, service: Service) -> None:
        if action == "resume":
            service.resume()
        else:
            service.start()

    def _fault(self) -> None:
        role = self.rng.choice(["worker", "worker", "beat", "redis"])
        self.restarts = [r for r in self.restarts if r.is_alive()]
        restarting = len(self.restarts)
        up = [
            s
            for s in self.services.values()
            if s.name.startswith(role) and s.up and not self._pending_for(s) and not restarting
        ]
        if not up:
            return
        service = self.rng.choice(up)
        kind = self.rng.choice(["kill", "kill", "stop", "restart"] if role == "worker" else
                               ["kill", "stop"])  # fmt: skip
        lease_out = self.settings.lease_ttl + self.settings.sweep_interval
        if kind == "kill":
            service.kill()
            self.pending.append((time.monotonic() + self.rng.uniform(0.5, 5), "start", service))
        elif kind == "stop":
            service.pause()
            pause = (
                self.rng.uniform(lease_out + 1, lease_out + 6)
                if role == "worker"
                else self.rng.uniform(2, 8)
            )
            self.pending.append((time.monotonic() + pause, "resume", service))
        else:
            restart = threading.Thread(target=self._restart, args=(service,), daemon=True)
            self.restarts.append(restart)
            restart.start()
        self.faults.add(f"{role}_{kind}")
        self.last_fault_at = time.time()

    def _restart(self, service: Service) -> None:
        service.terminate(timeout=30)
        service.start()

    def _pending_for(self, service: Service) -> bool:
        return any(p[2] is service for p in self.pending)

    def stop(self) -> None:
        """Stop injecting, undo every fault still in force, and have every service up."""
        super().stop()
        for restart in self.restarts:
            restart.join(60)
        for _, action, service in sorted(self.pending, key=lambda p: p[0]):
            self._undo(action, service)
        self.pending.clear()
        for service in self.services.values():
            if service.stopped:
                service.resume()
            service.start(wait=60)
