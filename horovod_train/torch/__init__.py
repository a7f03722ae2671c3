"""The PyTorch trainer: its run of epochs and its benchmark steps
(trainer), elastic training (elastic), the networks (models), the two data
pipelines (device_data, dataloader), checkpoints, presets, the GPU host's
checks and the allocator settings of its ranks."""
