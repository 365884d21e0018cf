/* api/file: the structure behind gmlx.h's gm_file handle (not a public header): an open GGUF
 * header and the model description made from it, shared by the file, machine and remote parts
 * of the public API (file.c, machine.c, remote_api.c).
 * Threads: immutable once gm_file_wrap returns; any thread may read it.
 */
#ifndef GM_API_FILE_H
#define GM_API_FILE_H

#include "gmlx.h"
#include "gguf/gguf.h"
#include "model/model.h"

struct gm_file {
    gm_gguf *g;
    gm_model_desc desc;      /* valid when described */
    bool described;
    gm_err desc_err;         /* why not, when !described */
    gm_file_info info;
};

/* Takes g (closed on failure too) and describes its model into a new handle. GM_ENOMEM. */
int gm_file_wrap(gm_file **out, gm_gguf *g, gm_err *err);

#endif
