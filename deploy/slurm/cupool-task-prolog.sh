#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Slurm TaskProlog (copied to each node; slurm.conf:
# TaskProlog=/opt/cupool/slurm/cupool-task-prolog.sh): runs each task under
# cupool, capped at the job's share of its GPU. A job that asked for N of a
# GPU's shards (--gres=shard:N; Slurm gives the TaskProlog
# SLURM_SHARDS_ON_NODE) of SHARDS_PER_GPU (gres.conf's Count of shards per
# GPU: set it here if not 8) gets N/SHARDS_PER_GPU of the device's memory
# (Slurm 22.05 takes a job's shards on a node from one GPU: a request for
# more stays pending); a job with whole GPUs no cap. One user's jobs sharing
# a node's GPUs take turns in one group. Slurm applies the "export
# NAME=VALUE" lines this prints to the task. It runs as the job's user, in
# the job's environment (which may name its own LIBCUPOOL or SHARDS_PER_GPU:
# a cap is an agreement, not a wall). make test runs it under a real
# one-node Slurm (test/test_slurm.py).
SHARDS_PER_GPU=${SHARDS_PER_GPU:-8}
LIBCUPOOL=${LIBCUPOOL:-/opt/cupool/lib/libcupool.so}
[ -r "$LIBCUPOOL" ] || exit 0
# A step of a batch job inherits its script's LD_PRELOAD, cupool already in it.
case ":${LD_PRELOAD:-}:" in
*":$LIBCUPOOL:"*) ;;
*) echo "export LD_PRELOAD=$LIBCUPOOL${LD_PRELOAD:+:$LD_PRELOAD}" ;;
esac
if [ -n "${SLURM_SHARDS_ON_NODE:-}" ] && [ "$SLURM_SHARDS_ON_NODE" -gt 0 ]; then
    share=$((100 * SLURM_SHARDS_ON_NODE / SHARDS_PER_GPU))
    [ "$share" -gt 100 ] && share=100
    [ "$share" -lt 1 ] && share=1
    echo "export CUPOOL_MAX_RESERVED=$share%"
    echo "export CUPOOL_GROUP=slurm-$(hostname -s)"
    echo "export CUPOOL_GROUP_MAX_RESERVED=95%"
fi
