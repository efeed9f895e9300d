"""NVIDIA DCGM's diagnostic (`dcgmi diag -r 1|2|3`), judged per test and GPU, with the remedy its cause calls for.

The output is read by dcgm_read.py (any DCGM version, JSON or table). A failed test's messages are classified by
their DCGM_FR code (the JSON's `error_id`, else the message matched against each code's wording,
dcgm_codes.py), and the code's category and severity say what kind of problem it is:
- a setting (persistence mode off, a CUDA variable, graphics processes, a low power limit): WARN, its command;
- the install (a library, the driver, permissions, Fabric Manager): FAIL, fix the install, not the GPU;
- a GPU to reset (pending row remap or page retirement): FAIL, reset it, drain it if it comes back;
- hardware (isolate or triage): FAIL, drain the node and have the GPU looked at;
- DCGM's own error (internal, its host engine): UNKNOWN, never a verdict on the GPU.
A message with no known code takes the kind of the test it failed (DCGM's Deployment checks by name, the rest
hardware). A skipped or not-run test is UNKNOWN, counted once whatever rows said it; a test whose summary
failed while its GPUs passed is failed. An output with nothing readable is UNKNOWN with DCGM's version and why; a
cut table's rows are judged as they are, and what was cut off is UNKNOWN.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from clustercheck.core.result import Finding, Status
from clustercheck.outputs.dcgm_codes import BY_ID, CODES, Code
from clustercheck.outputs.dcgm_read import CUT_TEST, Diag, DiagResult, Message, parse_diag

# kind -> (status, what it is, remedy)
KINDS: Dict[str, Tuple[Status, str, str]] = {
    "setting": (Status.WARN, "a setting, not the hardware", "change the setting (below); the GPU is not at fault"),
    "install": (Status.FAIL, "the driver / CUDA / DCGM install, not the GPU",
                "fix the install on that node (driver and CUDA libraries, permissions, nvidia-fabricmanager where "
                "NVSwitches are), then rerun dcgmi diag; do not replace the GPU for this"),
    "reset": (Status.FAIL, "a GPU that needs a reset",
              "drain the node, reset the GPU (nvidia-smi -r -i <gpu>) or reboot, and rerun dcgmi diag -r 3; if it "
              "comes back, have the GPU replaced"),
    "hardware": (Status.FAIL, "a hardware fault",
                 "drain the node, rerun dcgmi diag -r 3 and read dmesg (Xid); have the GPU replaced if it fails again"),
    "monitor": (Status.WARN, "usable, to be watched", "the GPU can train; watch it (dcgmi diag -r 3 at the next drain)"),
    "dcgm": (Status.UNKNOWN, "DCGM's own error, not a verdict on the GPU",
             "rerun dcgmi diag; check nv-hostengine (systemctl status nvidia-dcgm) and DCGM's log"),
}
# A code whose fix is a setting: what it is and the command (DCGM's severity CONFIG, "can be configured").
SETTINGS: Dict[int, Tuple[str, str]] = {
    29: ("persistence mode is off", "nvidia-smi -pm 1 on every GPU as root (or enable nvidia-persistenced at boot)"),
    28: ("a CUDA environment variable that limits performance is set",
         "unset the variable DCGM names (CUDA_LAUNCH_BLOCKING, CUDA_DEVICE_MAX_CONNECTIONS ...) for DCGM and jobs"),
    25: ("processes with graphics contexts run on the GPUs", "stop them (nvidia-smi lists them): no display server "
                                                             "on a training node"),
    72: ("the enforced power limit is too low", "restore the default limit: nvidia-smi -pl <W> (nvidia-smi -q -d POWER "
                                                "shows the default)"),
    61: ("an ECC mode change is pending", "reboot the node (or reset the GPU) to apply it"),
    74: ("the GPU runs in a low double-precision operating mode", "nvidia-smi --gom=0 and a reboot"),
    55: ("ECC is off", "nvidia-smi -e 1 and a reboot, if the GPU should run with ECC"),
}
# DCGM's Deployment checks by the names its table and JSON give them (2.x-3.x; in 4.x they are the `software`
# test, and their name prefixes the message): the kind a failure without a known code takes.
TEST_KINDS: Dict[str, str] = {
    "denylist": "install", "blacklist": "install", "nvml library": "install", "cuda main library": "install",
    "cuda toolkit library": "install", "cuda toolkit libraries": "install", "permissions and os blocks": "install",
    "persistence mode": "setting", "environment variables": "setting", "environmental variables": "setting",
    "graphics processes": "setting", "page retirement": "reset", "page retirement/row remap": "reset",
    "inforom": "hardware", "fabric manager": "install", "software": "install",
}
TEST_SETTING_CODES = {"persistence mode": 29, "environment variables": 28, "environmental variables": 28,
                      "graphics processes": 25}
NOT_PASSED = ("Skip", "Not Run")


def kind_of_code(code: Code) -> str:
    if code.id in SETTINGS:
        return "setting"
    if code.category in ("INTERNAL_OTHER", "NONE"):
        return "dcgm"
    if code.category in ("SOFTWARE_CUDA", "SOFTWARE_LIBRARY", "SOFTWARE_CONFIG") or code.severity == "CONFIG":
        return "install"
    if code.severity == "RESET":
        return "reset"
    if code.severity == "MONITOR":
        return "monitor"
    return "hardware" if code.category.startswith(("HARDWARE", "PERF", "SOFTWARE_XID")) or \
        code.severity == "ISOLATE" else "install"


def _words(text: str) -> List[str]:
    return re.findall(r"[a-z]+", text.lower())


def _pattern_words(message: str) -> List[str]:
    return _words(re.sub(r"%[-#+ 0-9.]*(?:hh|h|ll|l|z)?[a-zA-Z]", " ", message))


_KNOWN = [(code, _pattern_words(m)) for code in CODES for m in code.messages]
_KNOWN = [(code, words) for code, words in _KNOWN if len(words) >= 4]


def code_of(message: Message) -> Optional[Code]:
    """The DCGM_FR code a message carries: its error_id, else the code whose wording it follows (every word of
    the code's first sentence, in order, among the message's first words: dcgmi cuts long cells)."""
    if message.code is not None and message.code in BY_ID and message.code != 0:
        return BY_ID[message.code]
    words = _words(message.text)[:40]       # 4.x prefixes the check: "Persistence Mode: Persistence mode for ..."
    best, best_len = None, 0
    for code, wanted in _KNOWN:
        position = 0
        for word in wanted:
            try:
                position = words.index(word, position) + 1
            except ValueError:
                break
        else:
            if len(wanted) > best_len:
                best, best_len = code, len(wanted)
    return best


def gpus_named(text: str) -> List[int]:
    return sorted({int(g) for g in re.findall(r"\bGPU\s*(\d+)\b", text)})


def judge_dcgm(node: str, answer: Optional[Dict]) -> List[Finding]:
    """What the node's probe brought back from dcgmi (None: DCGM is not installed there: nothing said)."""
    if not answer:
        return []
    level = answer.get("level", 1)
    if answer.get("skipped"):
        return [Finding("device.dcgm", Status.UNKNOWN, f"dcgmi diag -r {level} not run on {node}: {answer['skipped']}",
                        [], "run it where it can run (MIG off), or rely on the measured figures", [node])]
    found = judge_dcgm_diag(node, parse_diag(answer.get("output") or ""), level)
    if answer.get("exit") not in (0, None) and not any(f.status is Status.FAIL for f in found):
        found.append(Finding("device.dcgm", Status.UNKNOWN, f"dcgmi diag -r {level} on {node} exited "
                                                            f"{answer['exit']} and no test says why",
                             [line for line in (answer.get("stderr") or "").splitlines()[-3:] if line.strip()],
                             "run dcgmi diag by hand on that node (is nv-hostengine running?)", [node]))
    return found


def _run_name(level) -> str:
    return f"dcgmi diag -r {level}" if level else "dcgmi diag"


def by_test(results: List[DiagResult]) -> Dict[str, List[DiagResult]]:
    tests: Dict[str, List[DiagResult]] = {}
    for result in results:
        tests.setdefault(result.test, []).append(result)
    return tests


def judge_dcgm_diag(node: str, diag: Diag, level: int) -> List[Finding]:
    """One finding per kind of problem of each failed test (its GPUs named), one for what was skipped, one OK for
    what passed."""
    which = _run_name(level) + (f" (DCGM {diag.version})" if diag.version else "")
    if diag.runtime_error:
        return [Finding("device.dcgm", Status.UNKNOWN, f"{which} could not run on {node}: {diag.runtime_error}", [],
                        KINDS["dcgm"][2], [node])]
    if not diag.results:
        why = "no test result in its JSON" if diag.form == "json" else "neither its JSON nor its table"
        return [Finding("device.dcgm", Status.UNKNOWN, f"{which} on {node}: its output could not be read ({why})",
                        [], "run `dcgmi diag -r 1` on the node by hand", [node])]
    findings, skipped, passed = [], [], []
    for test, results in by_test(diag.results).items():
        statuses = {r.status for r in results}
        if statuses & {"Fail", "Warn"}:
            findings += failed_test(node, level, test, results)
        elif statuses & set(NOT_PASSED):
            skipped.append((test, sorted({g for r in results if r.status in NOT_PASSED for g in r.gpus or []})))
        elif statuses == {"Pass"}:
            passed.append(test)
        else:
            findings.append(Finding("device.dcgm", Status.UNKNOWN, f"{which} on {node}: {test} ended "
                                                                   f"{'/'.join(sorted(statuses))}, not a result "
                                                                   f"clustercheck knows", [],
                                    "read dcgmi diag's output on that node", [node]))
    if skipped:
        findings.append(Finding("device.dcgm", Status.UNKNOWN, f"{which} skipped {len(skipped)} test(s) on {node}",
                                [test + (f" (GPU {', '.join(map(str, gpus))})" if gpus else "")
                                 + (": EUD (the extended utility diagnostics) is not installed or not enabled"
                                    if re.match(r"^(cpu[ _])?eud", test, re.I) else "") for test, gpus in skipped],
                                "a skipped test is not a pass: enable it (dcgmi diag -p <plugin>.is_allowed=true) "
                                "or check it another way", [node]))
    if diag.cut:
        read = [t for t in by_test(diag.results) if t != CUT_TEST]
        findings.append(Finding("device.dcgm", Status.UNKNOWN, f"{which} on {node}: its table was cut "
                                                               f"({' and '.join(diag.cut)} missing); what it shows is "
                                                               f"judged, the rest was not seen",
                                [f"read: {', '.join(read) or 'no whole test row'}"],
                                "give the whole output (dcgmi diag -r N -j, or the full log)", [node]))
    if passed and not any(f.status is Status.FAIL for f in findings):
        findings.append(Finding("device.dcgm", Status.OK, f"{which} on {node}: {len(passed)} test(s) passed "
                                                          f"({', '.join(passed[:6])}{', ...' if len(passed) > 6 else ''})"))
    return findings


def failed_test(node: str, level: int, test: str, results: List[DiagResult]) -> List[Finding]:
    """A test that failed (or warned): its messages grouped by the kind of their cause, one finding each."""
    warned_only = not any(r.status == "Fail" for r in results)
    messages = [m for r in results if r.status in ("Fail", "Warn") for m in r.messages if m.kind != "info"]
    if not messages:       # the reason sits on another row of the test (a 4.x summary row, a per-GPU row)
        messages = [m for r in results for m in r.messages if m.kind != "info"]
    failed_gpus = sorted({g for r in results if r.status in ("Fail", "Warn") for g in r.gpus or []})
    groups: Dict[str, List[Tuple[Message, Optional[Code]]]] = {}
    for message in _unique(messages):
        code = code_of(message)
        groups.setdefault(kind_of_code(code) if code else TEST_KINDS.get(test.lower(), "hardware"), []).append(
            (message, code))
    if not groups:
        code = BY_ID.get(TEST_SETTING_CODES.get(test.lower(), -1))
        groups[TEST_KINDS.get(test.lower(), "hardware")] = [(Message(""), code)]
    findings = []
    for kind, said in groups.items():
        if kind == "monitor" and not warned_only:
            kind = "hardware"     # DCGM failed the test on it: not merely to be watched
        status, what, remedy = KINDS[kind]
        if warned_only and status is Status.FAIL:
            status = Status.WARN
        gpus = sorted({g for m, _ in said for g in (m.gpus or gpus_named(m.text))}) or failed_gpus
        setting = next((SETTINGS[c.id] for _, c in said if c and c.id in SETTINGS), None)
        if kind == "setting" and setting:
            what, remedy = f"a setting, not the hardware: {setting[0]}", setting[1]
        codes = sorted({f"DCGM_FR_{c.name} ({c.id})" for _, c in said if c})
        evidence = [m.text for m, _ in said if m.text][:3] + ([f"DCGM code: {', '.join(codes)}"] if codes else [])
        findings.append(Finding("device.dcgm", status,
                                f"{_run_name(level)}: {test} {'warned' if warned_only else 'failed'} on {node}"
                                + (f", GPU {', '.join(map(str, gpus))}" if gpus else "") + f" ({what})",
                                evidence or [f"{test}: {'Warn' if warned_only else 'Fail'}, no message"], remedy,
                                [node]))
    return findings


def _unique(messages: List[Message]) -> List[Message]:
    """A message once: 4.x repeats each GPU's messages in the test's summary."""
    seen, found = set(), []
    for message in messages:
        if message.text not in seen:
            seen.add(message.text)
            found.append(message)
    return found
