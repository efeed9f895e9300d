"""How `clustercheck smoke` shows its result: progress while it runs, then the verdict."""

from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional, Sequence

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding
from clustercheck.core.progress import current as current_progress
from clustercheck.display.findings import findings_lines, findings_markdown, json_header, report_header
from clustercheck.ranks.runs import launched_by, stalled_text
from clustercheck.stages.smoke.facts import SmokeFacts


def progress_printer() -> Callable[[str, Dict], None]:
    """Rank 0's progress as it comes, and DeepSpeed's first-use compile, so a long wait is not a silent hang."""
    def show(node: str, event: Dict) -> None:
        kind = event.get("event")
        if kind == "start" and event.get("resume"):
            text = f"{event['world']} fresh ranks up, to resume from the checkpoint"
        elif kind == "start":
            text = (f"{event['world']} ranks up on {event['backend']}: {event['mode']}, {event['preset']} "
                    f"({event['parameters']:,} parameters), {event['steps']} steps")
        elif kind == "step":
            text = (f"step {event['step']}: loss {event['loss']:.4f}, {event['tokens_per_s']:.0f} tokens/s, "
                    f"peak {event['peak_mem_mb']:.0f} MB")
        elif kind == "compiling":
            text = f"{node}: {event['text']}"
        elif kind == "model":
            text = (f"{event['directory']}: {event['parameters']:,} parameters, {event['trainable']:,} trained"
                    f"{' (LoRA rank %d)' % event['lora']['rank'] if event.get('lora') else ''}; text as "
                    f"{event['tokens']}")
        elif kind == "deepspeed_config":
            text = f"{event['file']} runs as {event['mode']}; \"auto\" resolved: " + (
                ", ".join(f"{k}={v}" for k, v in event["resolved"].items()) or "none")
        elif kind == "saved":
            text = (f"checkpoint of step {event['step']} saved in {event.get('save_s', 0):.2f} s "
                    f"({event.get('bytes', 0) / 1e6:,.1f} MB seen from {node})")
        elif kind == "resumed":
            text = f"resumed at step {event['step']} (checkpoint loaded in {event.get('load_s', 0):.2f} s)"
        elif kind == "stalled":
            text = stalled_text(event)
        else:
            return
        current_progress().say(f"[smoke] {text}")
    return show


def _steps(facts: SmokeFacts) -> List[Dict]:
    return facts.stage.events("step") if facts.stage else []


def render_terminal(facts: SmokeFacts, findings: Sequence[Finding], verbose: bool = False) -> str:
    names = [n.name for n in facts.nodes]
    lines = [f"clustercheck smoke: {len(names)} node{'s' if len(names) != 1 else ''} ({fold(names)}), "
             f"{sum(facts.nproc.values()) or '?'} ranks" + launched_by([facts.stage] if facts.stage else []), ""]
    return "\n".join(lines + findings_lines(findings, verbose))


def to_json(facts: SmokeFacts, findings: Sequence[Finding]) -> Dict:
    stage = facts.stage
    return {**json_header("smoke", findings), "problems": facts.problems,
            "launcher": stage.config.get("launcher") if stage else None,
            "nproc": facts.nproc, "steps": _steps(facts),
            "summary": facts.summary, "resumed": facts.resumed_summary, "checkpoint": facts.checkpoint_times,
            "storage": next(iter(stage.events("storage")), None) if stage else None,
            "wall_s": stage.wall_s if stage else None,
            "nodes": {n: {"exit_code": r.exit_code, "lost": r.lost, "error": r.error, "stderr_tail": r.stderr_tail}
                      for n, r in (stage.runs.items() if stage else [])}}


def training_curve(facts: SmokeFacts, stem: str) -> Optional[str]:
    """<stem>-loss.png: rank 0's loss against the step; its file name (None without steps or matplotlib)."""
    steps = _steps(facts)
    if not steps:
        return None
    try:
        import matplotlib   # optional (the train extra): no plots without it
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt   # after use("Agg")
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([s["step"] for s in steps], [s["loss"] for s in steps], marker="o")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (mean over ranks)")
    ax.set_title("smoke: training loss")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path = f"{stem}-loss.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return os.path.basename(path)


def render_markdown(facts: SmokeFacts, findings: Sequence[Finding], command: str, images: Sequence[str] = ()) -> str:
    names = [n.name for n in facts.nodes]
    out = report_header("smoke", findings, command, [f"- nodes: {len(names)} ({fold(names)})"])
    out += findings_markdown(findings)
    steps = _steps(facts)
    if steps:
        out += ["## Training log (rank 0)", "", "| step | loss | tokens/s | peak MB |", "|---|---|---|---|"]
        out += [f"| {s['step']} | {s['loss']:.4f} | {s['tokens_per_s']:.0f} | {s['peak_mem_mb']:.0f} |" for s in steps]
        out.append("")
    out += [line for image in images for line in (f"![{image}]({image})", "")]
    return "\n".join(out)
