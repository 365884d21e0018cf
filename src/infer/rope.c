/* RoPE angle rates and magnitude (see rope.h). */
#include "infer/rope.h"

#include <math.h>
#include <string.h>

/* The pair index whose wavelength makes n_turns rotations over ctx_orig positions. */
static double yarn_corr_dim(uint32_t n_rot, uint32_t ctx_orig, double n_turns, double base)
{
    return n_rot * log(ctx_orig / (n_turns * 2 * M_PI)) / (2 * log(base));
}

int gm_rope_freqs(const gm_hparams *hp, uint32_t n_rot, const float *freq_factors, double *inv,
                  float *mscale, gm_err *err)
{
    const uint32_t half = n_rot / 2;
    const bool linear = strcmp(hp->rope_scaling, "linear") == 0;
    const bool yarn = strcmp(hp->rope_scaling, "yarn") == 0;
    if (!linear && !yarn && strcmp(hp->rope_scaling, "none") != 0)
        return gm_err_set(err, GM_EUNSUPPORTED, "rope scaling '%s' is not supported (gmlx applies "
                          "none, linear and yarn)", hp->rope_scaling);
    const double factor = hp->rope_scale_factor;
    if ((linear || yarn) && !(factor > 0 && isfinite(factor)))
        return gm_err_set(err, GM_EFORMAT, "rope scaling factor %g is not a positive number", factor);
    if (yarn && hp->rope_ctx_orig == 0)
        return gm_err_set(err, GM_EFORMAT, "yarn rope scaling without a training context length");
    for (uint32_t i = 0; i < half; i++) {
        inv[i] = pow((double)hp->rope_base, -2.0 * i / (double)n_rot);
        if (freq_factors)
            inv[i] /= freq_factors[i];
    }
    *mscale = 1.0f;
    if (linear) {
        for (uint32_t i = 0; i < half; i++)
            inv[i] /= factor;
    } else if (yarn) {
        const double base = hp->rope_base, ext = hp->yarn_ext_factor;
        double low = yarn_corr_dim(n_rot, hp->rope_ctx_orig, hp->yarn_beta_fast, base);
        double high = yarn_corr_dim(n_rot, hp->rope_ctx_orig, hp->yarn_beta_slow, base);
        if (!hp->yarn_no_truncate) {
            low = floor(low);
            high = ceil(high);
        }
        low = low > 0 ? low : 0;
        high = high < n_rot - 1 ? high : n_rot - 1;
        for (uint32_t i = 0; i < half; i++) {
            double y = (i - low) / (high - low > 0.001 ? high - low : 0.001);
            double mix = ext * (1 - (y < 0 ? 0 : y > 1 ? 1 : y));
            inv[i] = inv[i] / factor * (1 - mix) + inv[i] * mix;
        }
        *mscale = hp->yarn_attn_factor * (ext != 0 ? (float)(1 + 0.1 * log(factor)) : 1.0f);
    }
    return 0;
}
