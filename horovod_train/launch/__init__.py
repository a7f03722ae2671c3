"""Starting runs: the host model and its readers (hosts), horovodrun with
its input checked first (horovodrun), the host list an elastic run
discovers (host_discovery), Slurm's job, its Submitit front end and the
allocation (slurm/), and the image started on hosts over ssh (containers).
Nothing here imports a framework: these run on the launching machine,
before any rank."""
