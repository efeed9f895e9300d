"""Exit codes and the one exception type for bad user input.

Exit codes follow the Nagios order used by health-check tools: the worse the
cluster, the higher the code. Bad input has its own code so that scripts can tell
"the cluster is broken" from "the command was wrong".
"""

EXIT_OK = 0          # everything passed
EXIT_WARN = 1        # usable, with warnings
EXIT_FAIL = 2        # not ready: a check failed or a command failed on a node
EXIT_UNKNOWN = 3     # could not check: a node unreachable, auth or host key refused
EXIT_BAD_INPUT = 64  # bad command line or input file (sysexits EX_USAGE); nothing was contacted
EXIT_INTERRUPTED = 130


class NotChecked(Exception):
    """Nothing could be checked (no node answered, nothing to compare): the command ends UNKNOWN, exit 3,
    with this message, never with a pass."""


class InputError(Exception):
    """Bad user input: names the source (file and line) and the offending value."""

    def __init__(self, message: str, source: str = "", line: int = 0, value: str = ""):
        self.message = message
        self.source = source
        self.line = line
        self.value = value
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.source
        if where and self.line:
            where = f"{where}:{self.line}"
        parts = [f"{where}: " if where else "", self.message]
        if self.value:
            parts.append(f": {self.value!r}")
        return "".join(parts)


def caused_by_interrupt(exc: BaseException) -> bool:
    """A Ctrl-C (SIGTERM, SIGHUP) that Python re-raised as another error: a KeyboardInterrupt raised while a
    dataclass is defined comes out as "RuntimeError: Error calling __set_name__ ..." with it as the cause."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
