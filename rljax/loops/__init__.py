"""Compiled training loops: on-policy, off-policy (with replay memory), evaluation."""
