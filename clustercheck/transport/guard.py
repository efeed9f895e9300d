"""The wrapper that keeps remote commands from outliving the tool.

Closing an SSH channel does not kill the remote process (no pty, no SIGHUP). So each
command runs as its own session and process group (setsid), and a watcher reads the
channel's stdin: the tool never closes it, so EOF means the channel or connection is
gone (deadline, Ctrl-C, crash), and the watcher kills the whole group, TERM then KILL
(the watcher ends at once when the group has already exited).
POSIX sh only: nothing else may be assumed on a node.

Three traps the script avoids: without job control, sh gives a background list
/dev/null as stdin (hence the copy on fd 3); dash's kill does not take "--"; and the
channel can close before the child has made its own group (Ctrl-C right after the
start): the first `kill -TERM -$child` then finds no group, so the watcher retries
while the child or its group lives, rather than leaving it to run for ever.
"""

import shlex

_GUARD = (
    'exec 3<&0; '
    'setsid /bin/sh -c "$1" </dev/null & child=$!; '
    '( cat <&3 >/dev/null; '
    'while kill -0 $child || kill -0 -$child; do '
    'kill -TERM -$child && { sleep 1; kill -KILL -$child; break; }; sleep 0.05 || sleep 1; done '
    ') >/dev/null 2>&1 & '
    'exec 3<&-; '
    'wait $child'
)


def guard_argv(command: str) -> list:
    """argv that runs `command` under the guard (for a local process)."""
    return ["/bin/sh", "-c", _GUARD, "clustercheck-guard", command]


def guarded(command: str) -> str:
    """A command line for the remote login shell that runs `command` under the guard."""
    return "exec " + " ".join(shlex.quote(arg) for arg in guard_argv(command))
