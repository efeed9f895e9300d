"""`clustercheck device`: what each GPU (or, on CPU-only nodes, each node) does under load, judged against the
published figure for its model and against its peers; and whether every device computes the same bits.

gather.py runs clustercheck/onnode/device_probe.py on every node at once; facts.py holds what came back;
expected.py the cited figures; rules.py the judges; render.py shows them; stage.py wires them together.
"""
