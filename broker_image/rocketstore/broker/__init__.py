"""The RocketStore broker: serves the store to unmodified RocketMQ 4.x clients over remoting, with an
embedded name-server role and an HTTP side port for metrics and health (see broker.py)."""
