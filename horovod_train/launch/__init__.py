"""Starting runs: the host model and its readers (hosts), horovodrun with
its input checked first (horovodrun), the host list an elastic run
discovers (host_discovery) and the Slurm glue (slurm). Nothing here imports
a framework: these run on the launching machine, before any rank."""
