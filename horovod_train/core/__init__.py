"""What every framework's trainer shares: the options, the one epoch loop
(loop.fit and its Trainer interface), Horovod's runtime, MNIST and its
shards, metrics and outputs, checkpoints of arrays, the watchdog, errors
and the console."""
