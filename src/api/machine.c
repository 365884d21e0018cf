/* The public machine API (gmlx.h "this machine"): the probe of memory, limits, CPU features and
 * kernel level, whether io_uring and O_DIRECT work, and the drive test under a model file; what
 * gmlx doctor checks. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "api/file.h"
#include "base/err.h"
#include "base/log.h"
#include "base/sysinfo.h"
#include "infer/gpu.h"
#include "io/io.h"
#include "kernels/kernels.h"
#include "stream/stream.h"


int gm_machine_probe(gm_machine *out, const gm_tuning *t, gm_err *err)
{
    memset(out, 0, sizeof *out);
    gm_sysinfo sys;
    int rc = gm_sysinfo_probe(&sys, t ? t->ram_gb : -1, t ? t->avail_gb : -1, err);
    if (rc)
        return rc;
    out->ram_bytes = sys.ram_bytes;
    out->mem_total_bytes = sys.mem_total_bytes;
    out->cgroup_limit_bytes = sys.cgroup_limit_bytes;
    out->avail_bytes = sys.avail_bytes;
    out->avail_known = sys.avail_known;
    out->memlock_limit_bytes = sys.memlock_limit_bytes;
    out->ram_overridden = sys.ram_overridden;
    out->n_cpus = sys.n_cpus;
    /* the bits the level choice starts from, as the CPU reports them */
    uint32_t features = gm_cpu_features();
    gm_cpu_features_str(features, out->cpu_features, (int)sizeof out->cpu_features);
    out->kernel_level = gm_kernel_level_name(gm_kernel_level_best(features));
    return 0;
}

int gm_machine_io_uring(gm_err *err)
{
    gm_io_opts o = {.backend = GM_IO_URING};
    gm_io *q = NULL;
    int rc = gm_io_create(&q, &o, err);
    gm_io_destroy(q);
    return rc;
}

int gm_machine_gpu(gm_gpu_device *out, gm_err *err)
{
    int rc = gm_gpu_probe(out, err);
    if (rc == 0)
        gm_printable(out->name);
    return rc;
}

int gm_machine_direct_io(const char *path, bool *direct, gm_err *err)
{
    *direct = false;
    if (!path)
        return gm_err_set(err, GM_EINVAL, "no path given");
    int fd = -1;
    int rc = gm_io_open_direct(path, &fd, direct, err);
    if (rc == 0)
        close(fd);
    return rc;
}

double gm_fast_disk_gb_s(void) { return GM_STREAM_FAST_DISK_GB_S; }

int gm_file_drive_test(const gm_file *f, double *gb_s, gm_err *err)
{
    *gb_s = -1;
    if (gm_gguf_header_only(f->g))
        return gm_err_set(err, GM_EUNSUPPORTED, "%s: only the header is here (a remote or stored one): no drive "
                          "to test", f->info.path);
    if (!f->described)
        return gm_err_set(err, f->desc_err.code ? f->desc_err.code : GM_EFORMAT, "%s", f->desc_err.msg);
    return gm_stream_drive_test(f->g, &f->desc, gb_s, err);
}
