/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpus.h - how many NVIDIA GPUs this node has, as the driver shows them:
 * what bounds the devices a page may name (a device index a process uses
 * is below it, whatever CUDA_VISIBLE_DEVICES it has).
 */
#ifndef CUPOOL_NODE_GPUS_H
#define CUPOOL_NODE_GPUS_H

/* The larger of the counts of /dev/nvidiaN device files and of
 * /proc/driver/nvidia/gpus/ entries (one a GPU, by PCI address; what a
 * container sees when its /dev holds none); 0 when there are neither. */
int node_gpus_count(void);

#endif
