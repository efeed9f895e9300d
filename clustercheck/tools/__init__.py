"""Libraries behind single commands that are not stages: `launch` (launch_recipes.py), `node-check`
(node_health.py).
"""
