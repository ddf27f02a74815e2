"""The evaluation loop: what the controller reads, decides and does between wake-ups."""
