/* SPDX-License-Identifier: MIT */
/* Between the courier's queues (courier.c) and its lanes' processes (courier_lane.c). */
#ifndef KVPOOLD_COURIER_LANE_H
#define KVPOOLD_COURIER_LANE_H

#include <time.h>

#include "loop/courier.h"

uint64_t kvpd_courier_clock_ns(clockid_t clock);
/*
 * Makes @p's calls: in @l's process (@l: the lane whose thread this is, the
 * one that talks to it), or here when @l is NULL or has none. Returns their
 * CPU time, the wake-up passes they made included.
 */
uint64_t kvpd_lane_deliver(struct kvpd_courier *k, struct kvpd_courier_lane *l,
			   const struct kvpd_parcel *p);
/* Ends @l's process once it has made the calls it took. */
void kvpd_lane_stop(struct kvpd_courier_lane *l);

#endif
