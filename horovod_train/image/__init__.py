"""Building the images: the environment image from docker/ (`docker build
docker/`, GPU or CPU) and the image that carries the code, with podman or
docker, offline but for PyPI's and Debian's mirrors (build). It runs from a
checkout, whose docker/ is the build context."""
