/* infer/rope: the rotary embedding's angle rates and magnitude, with the scalings a GGUF can ask
 * for. Owns nothing: a pure function of the hyper-parameters, used once at engine load.
 *
 * theta_i(p) = p * inv[i] for rotated pair i < n_rot / 2, and the pair's cos and sin are scaled
 * by mscale. Plain RoPE: inv[i] = base^(-2i / n_rot). The rope_freqs tensor (per-pair factors,
 * Llama 3) divides inv[i]. Scaling types (rope.scaling.type):
 *   none     nothing more;
 *   linear   inv[i] / factor (position interpolation);
 *   yarn     per pair, a mix of the interpolated rate inv[i] / factor and the original inv[i]:
 *            mix_i = ext_factor * (1 - clamp((i - low) / max(0.001, high - low), 0, 1)), where
 *            low = max(0, floor(d(beta_fast))) and high = min(n_rot - 1, ceil(d(beta_slow))) for
 *            d(b) = n_rot ln(ctx_orig / (2 pi b)) / (2 ln base) (the pair index whose
 *            wavelength spans b rotations over the training context); the magnitude is
 *            attn_factor * (1 + 0.1 ln factor) (YaRN's attention temperature; 1 with ext_factor 0).
 * Threads: any. */
#ifndef GM_INFER_ROPE_H
#define GM_INFER_ROPE_H

#include <stdint.h>

#include "base/err.h"
#include "model/model.h"

/* Fills inv[0 .. n_rot / 2) and *mscale for hp's rope settings (hp->rope_base, the scaling
 * fields); freq_factors: n_rot / 2 per-pair divisors, or NULL. GM_EUNSUPPORTED for a scaling
 * type other than none, linear and yarn; GM_EFORMAT for a factor that is not a positive number
 * or a YaRN without a training context. */
int gm_rope_freqs(const gm_hparams *hp, uint32_t n_rot, const float *freq_factors, double *inv,
                  float *mscale, gm_err *err);

#endif
