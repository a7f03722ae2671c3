"""Horovod training platform. The trainers users run (pytorch_mnist,
tensorflow2_mnist, mxnet_mnist) and what they are made of: options and
presets, data (mnist, sharding, *_data), models, one epoch loop
(train_loop) with each framework's steps (train_*), checkpoints, metrics,
outputs and the console. Launching lives in launch/, measuring in bench/."""
