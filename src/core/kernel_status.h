/* Internal: the error slot of one plan run, which kernels fill through cf_kernel_fail
 * (op.h) from whichever pool thread meets the bad data.
 *
 * cf_plan_run keeps the slot on its stack and points cf_kernel_status_current at it on
 * its own thread; the pool (threads.c) carries the dispatching thread's pointer to the
 * workers that run its job. The first failing kernel claims the slot with one atomic
 * exchange and writes the message; the executor reads the flag after each node (one
 * relaxed load: the pool's join already orders the workers' writes before it). */
#ifndef CFORMERS_KERNEL_STATUS_H
#define CFORMERS_KERNEL_STATUS_H

#include <stdatomic.h>

typedef struct cf_kernel_status {
    atomic_bool failed;
    char msg[512];
} cf_kernel_status;

/* The slot of the plan run this thread works for; NULL outside one. */
extern _Thread_local cf_kernel_status *cf_kernel_status_current;

#endif
