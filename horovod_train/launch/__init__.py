"""Starting runs: the host model and its readers (hosts), horovodrun with
its input checked first (horovodrun), the host list an elastic run
discovers (host_discovery), the Slurm glue (slurm) and its Submitit
front end (submit), and the image started on hosts over ssh (containers).
Nothing here imports a framework: these run on the launching machine,
before any rank."""
