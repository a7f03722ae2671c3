"""The TensorFlow 2 trainer: a Keras network stepped with Horovod's
DistributedGradientTape (trainer)."""
