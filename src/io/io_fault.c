/* io fault layer (tests only): decides which accepted read gets which fault and rewrites the
 * kernel's answers the backends see, so either backend's error, retry, cancel and wedge paths can
 * be driven without a failing disk. See gm_io_fault in io.h. */
#include "io/io_impl.h"

#include <errno.h>

uint32_t gm_io_fault_tag(gm_io *io, gm_io_prio prio)
{
    const gm_io_fault *f = &io->fault;
    uint64_t n = io->n_submitted;
    uint32_t flags = 0;
    if (f->eio_at && n == f->eio_at)
        flags |= GM_IO_FAULT_EIO;
    if (f->short_at && n == f->short_at)
        flags |= GM_IO_FAULT_SHORT;
    if ((f->stall_at && n == f->stall_at) || (f->stall_speculative && prio == GM_IO_SPECULATIVE) ||
        f->stall_all)
        flags |= GM_IO_FAULT_STALL;
    if (f->wedge_at && n == f->wedge_at)
        flags |= GM_IO_FAULT_WEDGE;
    return flags;
}

uint64_t gm_io_fault_short_len(uint64_t len)
{
    uint64_t cut = (len / 2) & ~(uint64_t)(GM_IO_DIRECT_ALIGN - 1);
    return cut ? cut : len / 2;
}

int64_t gm_io_fault_result(uint32_t fault, bool first, uint64_t len, int64_t res)
{
    if (fault & GM_IO_FAULT_EIO)
        return -EIO;
    if ((fault & GM_IO_FAULT_SHORT) && first && res > 0) {
        uint64_t cut = gm_io_fault_short_len(len);
        if (cut > 0 && (uint64_t)res > cut)
            return (int64_t)cut;
    }
    return res;
}
