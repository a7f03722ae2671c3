"""Horovod training platform: trainers, data, checkpoints, metrics."""
