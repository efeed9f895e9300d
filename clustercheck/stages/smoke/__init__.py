"""`clustercheck smoke`: prove the cluster by training on it.

gather.py ships the reference trainer (clustercheck/onnode: trainer_files) to every node
and runs it under torchrun into facts.py's SmokeFacts; rules.py judges the run and
classify.py names the cause of a failure; render.py shows it; stage.py wires them into the
runner; options.py holds the flags.
"""
