"""A test cluster of network namespaces on one Linux host (root): see cluster.py."""

from clustercheck.sandbox.cluster import Sandbox, SandboxError, SandboxNode, down, list_sandboxes, missing_requirements

__all__ = ["Sandbox", "SandboxError", "SandboxNode", "down", "list_sandboxes", "missing_requirements"]
