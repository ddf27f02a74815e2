"""The training loop, Orbit's shape: the controller owns the loop (chunks of steps, saves, stops),
runners run the steps, actions are small callables between chunks (reports, histograms, profiler,
Prometheus), checkpoints and signals are what it saves and stops by."""
