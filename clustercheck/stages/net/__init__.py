"""`clustercheck net`: can every node reach every other on the ports training uses?

gather.py runs clustercheck/onnode/net_probe.py on the nodes (listeners, the mesh of
connection attempts, link quality, SSH between nodes) into facts.py's NetFacts; sampling.py
chooses the pairs; rules.py judges; render.py shows; stage.py wires them into the runner;
options.py holds the flags.
"""
