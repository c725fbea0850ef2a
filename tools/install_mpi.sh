#!/usr/bin/env bash
# Open MPI for the data-parallel build ([mf:dist], METAFORMER_MPI): mpicc and mpirun from Debian's
# libopenmpi-dev and openmpi-bin, installed when missing and apt-get can (as root, or with sudo
# without a password). Called by the Makefile (the MPI test, build/train-mpi) and .ci/run. Where it
# cannot, it says so and exits 0: make test then says "skip" for the MPI tests.
command -v "${MPICC:-mpicc}" > /dev/null && command -v mpirun > /dev/null && exit 0
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
if ! command -v apt-get > /dev/null; then
    echo "Open MPI is not installed and there is no apt-get: install mpicc and mpirun (Open MPI or MPICH) by hand"
    exit 0
fi
echo "installing Open MPI (libopenmpi-dev openmpi-bin) for the data-parallel build"
$sudo apt-get update -q > /dev/null 2>&1 || true
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q libopenmpi-dev openmpi-bin > /dev/null 2>&1 ||
    echo "could not install Open MPI (not root and no sudo?): apt-get install libopenmpi-dev openmpi-bin"
exit 0
