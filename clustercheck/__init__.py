"""clustercheck: is this multi-node cluster ready to train, and if not, what to fix."""

__version__ = "0.1.0"
