"""The storage stage: the checkpoint and data directories measured from every rank slot of every node at once,
checked for room and coherence, and the checkpoint's save and load time estimated."""
