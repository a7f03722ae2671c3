"""Measuring, apart from training: timed steps for --benchmark-steps and
the DDP baseline (timed_steps), and the trainer-speed comparison with an
upstream-style loop (throughput, upstream_example). The scripts that run
them live in benchmarks/."""
