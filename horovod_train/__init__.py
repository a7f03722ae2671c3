"""Horovod training platform, one part per job, as Horovod keeps one per
framework:

- the trainers users run, thin entry scripts: pytorch_mnist, tensorflow2_mnist,
  mxnet_mnist;
- core/: what every framework shares: the options, the one epoch loop and
  its Trainer interface, Horovod's runtime, MNIST and its shards, metrics
  and outputs, the watchdog, errors and the console;
- torch/, tensorflow/, mxnet/: each framework's trainer, model, data and
  checkpoint (elastic training beside PyTorch's trainer);
- launch/: starting ranks on hosts (horovodrun, Slurm, host discovery).

The measuring code lives apart, in the checkout's benchmarks/ package, which
imports this one; nothing here imports it."""
