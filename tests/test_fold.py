from clustercheck.display.fold import fold_outputs, render_run
from clustercheck.transport.base import NodeResult, Outcome
from clustercheck.transport.fanout import worst_exit_code


def results():
    return [
        NodeResult("node1", Outcome.OK, 0, "525.85.12\n"),
        NodeResult("node2", Outcome.OK, 0, "525.85.12\n"),
        NodeResult("node3", Outcome.OK, 0, "525.85.12\n"),
        NodeResult("node4", Outcome.OK, 0, "535.104.05\n"),
        NodeResult("node5", Outcome.OK, 0, "525.85.12\n"),
        NodeResult("node6", Outcome.REFUSED, detail="10.0.0.6:22: connection refused"),
        NodeResult("node7", Outcome.COMMAND_FAILED, 127, "", "nvidia-smi: not found\n", "exit code 127"),
    ]


def test_identical_outputs_fold_under_a_compact_host_list():
    blocks = fold_outputs(results())
    assert [(b.hosts, b.stdout) for b in blocks] == [
        ("node[1-3,5]", "525.85.12\n"), ("node4", "535.104.05\n"), ("node7", "")]


def test_render_names_failures_with_remedies():
    text = render_run(results())
    assert "node[1-3,5] (4)" in text
    assert "ok: 5/7 nodes (node[1-5])" in text
    assert "unreachable: connection refused: node6: 10.0.0.6:22: connection refused" in text
    assert "command failed: node7: exit code 127" in text
    assert "fix (unreachable: connection refused): " in text


def test_exit_code_is_the_worst_node():
    assert worst_exit_code(results()[:5]) == 0
    assert worst_exit_code(results()[:5] + results()[6:]) == 2
    assert worst_exit_code(results()) == 3
