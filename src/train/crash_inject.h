/* Crashes on purpose, for testing recovery (docs/training.md, "Fault injection"); off
 * unless the environment asks:
 *   CFORMERS_CRASH_AT_STEP=N[:RANK]  the process (of data-parallel rank RANK, or every
 *                                    rank) aborts once optimizer step N is done;
 *   CFORMERS_CRASH_IN_SAVE=1         the process aborts in the middle of its next
 *                                    checkpoint write (weights written, moments not),
 *                                    leaving the partial temporary file behind;
 *   CFORMERS_HANG_AT_STEP=N[:RANK]   the process stops (sleeps until killed) once step N
 *                                    is done, in the first run of a supervised job only
 *                                    (CFORMERS_LAUNCH_RESTART unset or 0), so that
 *                                    `cformers launch` has a hung rank to find.
 * The only place the library ends the process: that is what these variables ask. */
#ifndef CFORMERS_TRAIN_CRASH_INJECT_H
#define CFORMERS_TRAIN_CRASH_INJECT_H

#include <stdint.h>

/* Aborts when CFORMERS_CRASH_AT_STEP names this step (and this rank, or none). */
void cf_crash_at_step(int64_t step, int rank);
/* Hangs when CFORMERS_HANG_AT_STEP names this step (and this rank, or none). */
void cf_hang_at_step(int64_t step, int rank);
/* Aborts when CFORMERS_CRASH_IN_SAVE is set to a non-zero number. */
void cf_crash_in_save(void);

#endif
