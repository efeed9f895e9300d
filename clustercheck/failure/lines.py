"""How one line of a failed run reads: is it a warning (never counts, unless a row of the table says the warning
is the cause), an error line at all, a launcher's wrapper around a rank's failure (ChildFailedError,
CalledProcessError: the rank's own line says more), and which rank printed it, global (`[rank3]:`, torchrun's
summary) or local to its node (`[default1]:`, `local_rank: 1`, `--local_rank=1`).

What a line says is the vocabulary's (clustercheck/vocabulary: one table of rows, each kind defined once with
its rank, tier, meaning and remedy); the tiers are kinds.py's.
"""

from __future__ import annotations

import re
from typing import Optional, Tuple

from clustercheck.vocabulary import Meaning, cause_despite_warning, read_line
from clustercheck.vocabulary.lookup import NODE_CONTEXT_LINES
from clustercheck.vocabulary.kinds import ECHO, FAILED, KIND_ORDER, LINK, OWN, ROOT

__all__ = ["ECHO", "FAILED", "KIND_ORDER", "LINK", "OWN", "ROOT", "Meaning", "is_error", "is_warning", "is_wrapper",
           "rank", "ranks_of", "signature_of"]

# Not errors: Python's and c10's warnings, DeepSpeed's [WARNING] lines (they name optional modules).
_WARNING = re.compile(r"\b\w*Warning\b|\[WARNING\]|^\s*WARNING\b|^\s*\[?W\d{4}|warnings\.warn|\bWARN(?!\s*\w*Error)")
# Printed by healthy runs too: a host without IPv6 makes c10d say so at every start.
# NCCL says at INFO that it found no net plugin or topology file and carries on without (every healthy run
# with NCCL_DEBUG=INFO and no plugin installed): "Plugin load returned 2 : libnccl-net.so: cannot open shared
# object file" is not the loader failing the job.
_NOISE = re.compile(r"The IPv6 network addresses of .* cannot be retrieved|"
                    r"NCCL INFO (?:NET/Plugin|Could not open XML topology file|Unable to load libnccl-net)")
# ...but NCCL writes its errors at WARN level ("NCCL WARN", "net_ib.cu:781 WARN" before 2.4), and c10d its
# store's socket timeouts.
_ERROR_AT_WARN_LEVEL = re.compile(r"NCCL WARN|\.(cc|cu|c|h):\d+ WARN |\[c10d\].*timed out after")
# How an NCCL error tells the reader to turn on its logs: an advice inside an error, not a warning.
_DEBUG_ADVICE = re.compile(r"\(?run with NCCL_DEBUG=\w+[^)]*\)?|NCCL_DEBUG=WARN|TORCH_CPP_LOG_LEVEL=\w+")
_PREFIX = re.compile(r"^\s*(?:\[(?:default|rank)?\d+\]:?\s*)+")
# A raised exception's last line ("torch.OutOfMemoryError: ...", "KeyError: 'labels'") or a logger's error.
# Also the error shapes of the layers around the trainer, whatever their words: a program's own "prog: error:"
# (srun, sbatch, mpirun, pdsh, ssh), a logger's ERROR after its timestamp ("[2024-01-01 10:00:00,123] [ERROR]",
# "2024-01-01 10:00:00 - ERROR - "), glog's / c10's "E1201 12:00:00.123" and "[E1201 ...]", the C++ runtime's
# "terminate called after throwing", CPython's "Fatal Python error".
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit|Failure)\b(?::|$)|"
                        r"^(?:\[?(?:ERROR|FATAL|CRITICAL)\]?[\s:])|^(?:Error|error|FATAL|fatal):\s|"
                        r"^[\w.@/-]{1,40}: (?:[\w.-]+: )?(?:error|Error|ERROR|fatal|Fatal|FATAL|fatal error)\b:?|"
                        r"^\[?\d{4}-\d\d-\d\d[ T][\d:,.]+\]?\s*(?:[-|]\s*)?(?:\[?[\w.]+\]?\s*[-|]?\s*)?"
                        r"\[?(?:ERROR|FATAL|CRITICAL)\]?[\s:-]|"
                        r"^\[?[EF]\d{4} \d\d:\d\d:\d\d|^terminate called after throwing|^Fatal Python error:")
# A launcher reporting a rank's failure: the rank's own lines say why; these say which and how it ended.
WRAPPER = re.compile(r"ChildFailedError|CalledProcessError|ProcessRaisedException|ProcessExitedException|"
                     r"SignalException|KeyboardInterrupt|SystemExit|exits with return code|failed \(exitcode:|"
                     r"sigkill_handler|closing signal SIGTERM|error_handler|Signal 15 \(SIGTERM\)|Killing subprocess|"
                     r"process \d+ terminated with exit code|terminated with the following error|"
                     r"returned non-zero exit status|"
                     # srun's word that a task ended (src/srun/step_launch.c "%s: task%s %s: Exited with exit code
                     # %d", "... Terminated"): which task, never why
                     r": tasks? [\d,\-\[\] ]+: (?:Exited with exit code|Terminated\b)|Job step aborted|"
                     r"^\s*(?:Traceback|Root Cause|Failures:)|"
                     r"^\s*(?:time|host|rank|exitcode|error_file|traceback)\s+:")


# The shapes of lines the classifier reads besides those a row names: errors in their own words, launchers'
# wrappers and summaries (is_error, WRAPPER, torchrun_failures). With the table's rows, every line it can use.
STRUCTURE = (NODE_CONTEXT_LINES + "|" + r"Error|error|ERROR|Exception|Exit\b|FAIL|[Ff]ailed|[Ff]ailure|FATAL|[Ff]atal|CRITICAL|Traceback|"
             r"exitcode|exit code|exit status|return code|terminated with|returned non-zero|[Ss]ignal|sigkill|"
             r"Killing|KeyboardInterrupt|Root Cause|Failures:|^\s*\[\d+\]:\s*$|"
             r"^\s*(?:time|host|rank|exitcode|error_file|traceback)\s+:")


def is_warning(line: str) -> bool:
    if _NOISE.search(line):
        return True
    if cause_despite_warning(line):
        return False   # torch's "Setting the available devices to be zero" is a warning and the cause
    body = _DEBUG_ADVICE.sub("", _PREFIX.sub("", line))
    if re.match(r"(?:[\w]+\.)*\w+(?:Error|Exception)\b", body.strip()) and not re.match(r"\w*Warning", body.strip()):
        return False   # a raised exception is an error whatever advice its text carries
    return bool(_WARNING.search(body)) and not _ERROR_AT_WARN_LEVEL.search(line)


def rank(meaning: Meaning) -> int:
    """How telling a cause is among those one rank showed (lower: more): the kind's rank (kinds.py)."""
    return meaning.rank


def signature_of(line: str) -> Optional[Meaning]:
    """The cause a line shows (the table's row, refined by its context), or None."""
    return read_line(line)


def is_error(line: str) -> bool:
    """A line that reports an error in its own words: an exception, a logger's ERROR line."""
    return bool(_EXCEPTION.match(_PREFIX.sub("", line).strip()))


def is_wrapper(line: str) -> bool:
    return bool(WRAPPER.search(_PREFIX.sub("", line)))


def ranks_of(line: str) -> Tuple[Optional[int], Optional[int]]:
    """(global rank, local rank) a line names, each None when it does not."""
    match = (re.match(r"\s*\[rank(\d+)\]:", line) or re.search(r"\[Rank (\d+)\]", line)
             or re.search(r"\brank (\d+) and rank \d+ both on", line)
             or re.search(r"\bsrun: error: \S+: task (\d+): ", line))      # srun's task number is the global rank
    if match:
        return int(match.group(1)), None
    local = (re.match(r"\s*\[default(\d+)\]:", line) or re.search(r"\blocal_rank\s*[:=]\s*(\d+)", line)
             or re.search(r"--local[_-]rank[= ](\d+)", line)
             or re.search(r"Process (\d+) terminated with the following error", line))
    return None, (int(local.group(1)) if local else None)
