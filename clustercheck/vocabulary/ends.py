"""How a job's log says it ended well: the lines launchers and trainers print only after the last step, each taken
from the project that prints it. A log is READY only on one of these (clustercheck explain): a log with no error
and none of them stopped before its end (a hang in progress, or a log cut there), and says so.

Each row: (what it matches, who says it, the source's message). The patterns are RE2- and Python-compatible
(explain's streaming reader adds them to its prefilter)."""

from __future__ import annotations

import re
from typing import List, NamedTuple, Optional

TORCH = "pytorch/pytorch torch/distributed/elastic/agent/server/api.py "


class End(NamedTuple):
    match: str
    who: str
    source: str


ENDS: List[End] = [
    End(r"worker group successfully finished\. Waiting \d+ seconds for other agents", "torchrun",
        TORCH + "_invoke_run: \"[%s] worker group successfully finished. Waiting %s seconds for other agents to "
                "finish.\""),
    End(r"Local worker group finished \((?:WorkerState\.)?SUCCEEDED\)", "torchrun",
        TORCH + "_exit_barrier: \"Local worker group finished (%s). Waiting %s seconds for other agents to finish\""),
    End(r"Done waiting for other agents\. Elapsed: [\d.]+ seconds", "torchrun",
        TORCH + "_exit_barrier: \"Done waiting for other agents. Elapsed: %s seconds\""),
    End(r"Process \d+ exits successfully\.", "deepspeed",
        "deepspeedai/DeepSpeed deepspeed/launcher/launch.py: \"Process {process.pid} exits successfully.\""),
    End(r"Training completed\. Do not forget to share your model", "transformers",
        "huggingface/transformers src/transformers/trainer.py _inner_training_loop: \"Training completed. Do not "
        "forget to share your model on huggingface.co/models =)\""),
    End(r"\*\*\*\*\* train metrics \*\*\*\*\*|'train_runtime': [\d.]+", "transformers",
        "huggingface/transformers trainer_pt_utils.py log_metrics \"***** {split} metrics *****\"; trainer.py's "
        "final metrics (train_runtime, train_samples_per_second) logged after the last step"),
    End(r"`Trainer\.fit` stopped: `max_(?:epochs|steps)=\d+` reached", "lightning",
        "Lightning-AI/pytorch-lightning src/lightning/pytorch/loops/fit_loop.py: \"`Trainer.fit` stopped: "
        "`max_epochs={...}` reached.\" / \"`max_steps={...}` reached.\""),
    End(r"# Avg bus bandwidth\s*: [\d.]+", "nccl-tests",
        "NVIDIA/nccl-tests src/common.cu: \"# Avg bus bandwidth    : %g\" printed after the last size"),
    End(r"\{\"event\": \"(?:summary|done)\", ", "clustercheck",
        "clustercheck's reference trainer (reference_train/train.py: the \"summary\" event after the last step) and "
        "bench's worker (onnode/bench_worker.py: \"done\" after the last size)"),
]
_COMPILED = re.compile("|".join(f"(?:{end.match})" for end in ENDS))


def prefilter_source() -> str:
    """One pattern any end line matches: explain's streaming reader keeps these lines."""
    return "|".join(f"(?:{end.match})" for end in ENDS)


def ended_well(line: str) -> Optional[End]:
    """The row a line shows the job ended well by, or None."""
    if not _COMPILED.search(line):
        return None
    return next(end for end in ENDS if re.search(end.match, line))
