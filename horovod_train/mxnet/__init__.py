"""The MXNet trainer: a Gluon network stepped with Horovod's
DistributedTrainer (trainer)."""
