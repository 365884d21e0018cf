/* stream/pressure: memory-pressure shrink and regrow of the decode arena (spec 3.6, Linux).
 *
 * Owns: the pressure state machine (steps of 25% down from the sized arena, the polls since the
 * last step, the normal streak) and the reading of the kernel's signals. It owns no memory and
 * moves no bytes: the feeder (stream.h) polls it every GM_PRESSURE_POLL_EVERY decode stage calls
 * and resizes each layer to gm_pressure_slots() at that layer's next call.
 *
 * Levels, from Linux's signals (macOS gives them directly):
 *   critical  "full avg10" of the memory PSI >= 10 (all tasks stalled on memory 10% of the
 *             last 10 s; the process's cgroup's memory.pressure, else /proc/pressure/memory),
 *             or MemAvailable below half the floor;
 *   warning   "some avg10" >= 10, or MemAvailable below the floor (MemAvailable capped by the
 *             room under a cgroup memory limit, see gm_pressure_read_at; the plan sizes the arena to
 *             leave the floor and the runtime overhead free, so a sized arena alone never
 *             crosses it);
 *   normal    otherwise (also when neither file can be read).
 * Steps: a warning adds 1 step and a critical 2 (at most 3: the arena keeps 25% of its sized
 * capacity), only when 8 polls have passed since the last step. A normal poll grows the streak;
 * after 256 normal polls in a row a step is given back when MemAvailable covers the memory the
 * step would take again plus the floor. Each step prints one line.
 *
 * Threads: a gm_pressure belongs to the feeder's owner thread. Pure except gm_pressure_read.
 */
#ifndef GM_STREAM_PRESSURE_H
#define GM_STREAM_PRESSURE_H

#include <stdbool.h>
#include <stdint.h>

#define GM_PRESSURE_POLL_EVERY 64u
#define GM_PRESSURE_MAX_STEPS 3u
#define GM_PRESSURE_STEP_GAP 8u       /* polls between two shrinking steps */
#define GM_PRESSURE_REGROW_STREAK 256u /* normal polls before a step is given back */

typedef enum gm_pressure_level {
    GM_PRESSURE_NORMAL = 1,
    GM_PRESSURE_WARNING = 2,
    GM_PRESSURE_CRITICAL = 4,
} gm_pressure_level;

typedef struct gm_pressure_sample {
    bool psi_known;
    bool psi_cgroup;               /* read from the process's cgroup's memory.pressure */
    double some_avg10, full_avg10; /* percent */
    bool avail_known;
    uint64_t avail_bytes;
} gm_pressure_sample;

/* Reads the PSI file and the meminfo file (stand-ins for tests); a file that cannot be read or
 * parsed leaves its part unknown. Both NULL: the live system, gm_pressure_read_at(""). */
void gm_pressure_read(const char *psi_path, const char *meminfo_path, gm_pressure_sample *out);
/* The live reading with its files under root (tests: a fake /proc and /sys/fs/cgroup tree):
 * the stall figures of the process's cgroup v2 (its memory.pressure) when it is in one other
 * than the root and the file reads, else /proc/pressure/memory; and as the memory available MemAvailable capped by the room under the
 * process's cgroup memory limit (its limit less its usage, base/sysinfo.h), which is what the
 * plan sized the arena within: in a container MemAvailable alone is the host's. */
void gm_pressure_read_at(const char *root, gm_pressure_sample *out);

/* The level of a sample against the floor (bytes that must stay available). */
gm_pressure_level gm_pressure_level_of(const gm_pressure_sample *s, uint64_t floor_bytes);

typedef struct gm_pressure {
    uint32_t steps;
    uint32_t since_step;   /* polls since the last shrinking step */
    uint32_t normal_streak;
    uint64_t floor_bytes;
    uint64_t shrinks, regrows;
} gm_pressure;

void gm_pressure_init(gm_pressure *p, uint64_t floor_bytes);

/* One poll. arena_now_bytes: the arena's size now; arena_back_bytes: its size one step larger.
 * Returns +1 when the arena should shrink a step, -1 when it may regrow a step, 0 otherwise
 * (p->steps already changed). */
int gm_pressure_poll(gm_pressure *p, gm_pressure_level level, const gm_pressure_sample *s,
                     uint64_t arena_now_bytes, uint64_t arena_back_bytes);

/* Slots a layer sized for orig slots holds at this many steps: max(min_slots, floor(orig x (1 -
 * 0.25 x steps))), and never above orig. */
uint32_t gm_pressure_slots(uint32_t orig, uint32_t min_slots, uint32_t steps);

#endif
