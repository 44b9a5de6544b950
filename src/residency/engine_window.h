/* engine_window.h - the residency engine's window as the rest of the engine
 * sees it: what a finished background read does to its unit, and the host
 * cache's choice of victim (layer: residency). Not a public header; the
 * window's public side is acquire/release in residency.h. */
#ifndef STRATA_RESIDENCY_ENGINE_WINDOW_H
#define STRATA_RESIDENCY_ENGINE_WINDOW_H

#include "residency/engine_internal.h"

/* The engine's read_done (engine_read.h): marks the unit cached in host
 * memory or ready on the device and records the transfer, or fails the
 * engine (the failure sticks until destroy); then promotes what is cached
 * into the device window, so its copy runs while the current unit
 * computes. Lock held. */
void strata__res_read_done(strata_residency *e, const read_job *j,
			   strata_status s, const strata_error *jerr, uint64_t ns);

/* The host cache unit to evict (lock held), or SIZE_MAX. By policy among
 * cached units outside the lookahead range whose copy to the device is
 * done: LRU = least recent use, then lowest position; LFU = fewest uses,
 * then least recent, then lowest position. With `urgent` (the unit needed
 * now has no slot) and no such unit: the cached unit farthest ahead in
 * execution order. */
size_t strata__res_victim(const strata_residency *e, bool urgent);

#endif
