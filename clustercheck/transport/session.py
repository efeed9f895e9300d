"""The session-or-exec dispatch shared by the local and SSH transports: a node's commands go
through its session loop (agent.py) once the first starts it, else one exec each."""

from __future__ import annotations

import threading
from typing import Optional

from clustercheck.transport.agent import AgentUnavailable, Session, SessionLost
from clustercheck.transport.base import NodeResult, Outcome, Running, Transport, TransportError


class SessionTransport(Transport):
    """A transport whose commands go through the node's session loop when it starts, else one
    exec each. Subclasses give _new_session, _exec, _exec_start and _lost."""

    def _init_session(self, use: bool) -> None:
        self.use_session = use
        self.session: Optional[Session] = None
        self.session_problem = ""       # why the loop did not start: one exec per command here
        self._session_lock = threading.Lock()

    def _new_session(self) -> Session:
        raise NotImplementedError

    def _exec(self, command: str, timeout_s: float) -> NodeResult:
        raise NotImplementedError

    def _exec_start(self, command: str) -> Running:
        raise NotImplementedError

    def _lost(self, exc: SessionLost, doing: str) -> TransportError:
        return TransportError(Outcome.TOOL_ERROR, f"{self.name}: the session ended while {doing} ({exc})")

    def _session(self) -> Optional[Session]:
        """The loop that runs this node's commands, started by the first; None: one exec per command."""
        if not self.use_session or self.session_problem:
            return None
        with self._session_lock:
            if self.session is None or self.session.dead:
                try:
                    self.session = self._new_session()
                except AgentUnavailable as exc:
                    self.session_problem = str(exc)
                    return None
        return self.session

    def run(self, command: str, timeout_s: float) -> NodeResult:
        session = self._session()
        if session is None:
            return self._exec(command, timeout_s)
        try:
            return session.run(command, timeout_s)
        except SessionLost as exc:
            raise self._lost(exc, "the command ran") from None

    def start(self, command: str) -> Running:
        session = self._session()
        if session is None:
            return self._exec_start(command)
        try:
            return session.start(command)
        except SessionLost as exc:
            raise self._lost(exc, "starting a command") from None

    def _close_session(self) -> None:
        if self.session is not None:   # the loop kills what runs and removes its directory
            self.session.close()
            self.session = None
