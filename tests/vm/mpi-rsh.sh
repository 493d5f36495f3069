#!/bin/sh
# mpi-rsh HOST COMMAND...: the remote shell Open MPI's launcher (plm rsh) runs to start its
# daemon on the other end of tests/vm/two-nodes.sh's MPI allreduce: a pod (this file is the
# rdma-tools image's /bin/mpi-rsh) or, in the baseline, the other VM. A job's image carries
# sshd, or an MPI operator's launcher does this; the test's ends have a busybox nc serving
# /bin/sh on port 2222 of the rail instead (two-nodes.sh starts it). It carries only the launch;
# the ranks' data goes over UCX on the RDMA devices.
host=$1
shift
printf '%s\n' "$*" | exec busybox nc "$host" 2222
