"""Results where operators look: every check's status, the figures measured and the verdict as Prometheus
metrics (prometheus_client), pushed to a Pushgateway or written for node_exporter's textfile collector."""
