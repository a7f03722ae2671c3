"""GPUs without a framework: the NVIDIA driver (nvidia_driver, the
environment recipe's own file) and the rules a GPU host must meet (rules),
shared by launch/ (the preflight, the host facts), image/ and the trainers."""
