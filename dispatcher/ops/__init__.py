"""Operator commands: the agent-bridge CLI, doctor, register, init, prune, top, show and the demo.
The top layer: it may import every other one, and nothing imports it."""
