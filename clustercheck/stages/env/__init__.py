"""`clustercheck env`: what every node really runs, compared.

The node layer runs the probe (clustercheck/onnode/env_probe.py) on every node; facts.py
turns each document into comparable facts; rules.py and the *_rules.py modules judge them
(judges.py lists them in order); render.py shows them; stage.py wires them into the runner;
options.py holds the flags.
"""
