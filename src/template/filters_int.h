/* template/filters_int.h: what filters.c, filters_seq.c and tests.c share (private). */
#ifndef GM_TEMPLATE_FILTERS_INT_H
#define GM_TEMPLATE_FILTERS_INT_H

#include "template/tmpl_int.h"

typedef int (*filter_fn)(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);

/* Binds a filter's arguments to its parameter names (or returns the error). */
#define BIND(fname, names, slot, set)                                                              \
    do {                                                                                           \
        int rc_ = gm_targs_bind(c, a, fname, sizeof(names) / sizeof(names[0]), names, slot, set); \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

/* The filters of filters_seq.c, for the table in filters.c. */
int gm_tf_batch(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_slice(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_dictsort(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_first(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_last(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_items(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_join(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_list(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_max(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_min(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_map(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_select(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_reject(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_selectattr(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_rejectattr(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_reverse(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_sort(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_sum(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_unique(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_tf_length(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out);

#endif
