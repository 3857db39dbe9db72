/* The float steps around the products (rmsnorm, SiLU, attention over the cache) and a whole
 * decoder layer in one call (sf_layer_step), with the stop request that ends one part-way. */
#include "internal.h"

#include <string.h>

#include "specfill_kernels.h"

static void *attn_scratch;        /* attention scores, one row of them per share; under the call lock */
static size_t attn_scratch_cap;

/* ---- the float steps around the products ---- */

int sf_rmsnorm(const float *x, const float *w, int64_t M, int64_t K, float eps, float *out) {
    if (M < 0 || K <= 0 || K % SF_LANES != 0) return SF_EBADSHAPE;
    if (M == 0) return SF_OK;
    if (x == NULL || w == NULL || out == NULL) return SF_ENULL;
    sf_current_kernels()->rmsnorm(x, w, M, K, eps, out);
    return SF_OK;
}

int sf_silu_mul(const float *gate_up, int64_t M, int64_t F, float *out) {
    if (M < 0 || F <= 0) return SF_EBADSHAPE;
    if (M == 0) return SF_OK;
    if (gate_up == NULL || out == NULL) return SF_ENULL;
    sf_current_kernels()->silu_mul(gate_up, M, F, out);
    return SF_OK;
}

/* Queries a call of `attend` takes at most: its pointers and lengths live on the stack. */
#define SF_ATTEND_MAX 128

struct attn_ctx {
    const struct sf_kernels *k;
    const float *q, *k_cache, *v_cache;
    int64_t q_stride, M, H, group, parts, part_heads, D, cap, past, span, batch_rows;
    float scale;
    float *out;
};

/* Share s of ns takes a contiguous run of the KV * parts * M (key-value head, part of its
 * query heads, row) units; the units of one key-value head and part go to `attend`
 * together, up to batch_rows rows at once, so the cache of a key-value head is read once per
 * call, not once per query. A key-value head's query heads are split into parts only where
 * there are more threads than key-value heads times rows (a one-row step on many cores). */
static void attn_share(const void *p, int s, int ns) {
    const struct attn_ctx *c = p;
    const int64_t per_head = c->parts * c->M, units = (c->H / c->group) * per_head;
    const int64_t u0 = units * s / ns, u1 = units * (s + 1) / ns;
    float *scores = (float *)attn_scratch + (size_t)s * (size_t)(c->batch_rows * c->part_heads) * (size_t)c->span;
    const float *q[SF_ATTEND_MAX];
    float *out[SF_ATTEND_MAX];
    int64_t L[SF_ATTEND_MAX];
    for (int64_t u = u0; u < u1;) {
        const int64_t g = u / per_head, part = u % per_head / c->M, j0 = u % c->M;
        int64_t j1 = j0 + c->batch_rows;
        if (j1 > c->M) j1 = c->M;
        if (j1 - j0 > u1 - u) j1 = j0 + (u1 - u);
        const int64_t h0 = g * c->group + part * c->part_heads;
        const int64_t h1 = h0 + c->part_heads < (g + 1) * c->group ? h0 + c->part_heads : (g + 1) * c->group;
        int64_t n = 0;
        for (int64_t j = j0; j < j1; j++)
            for (int64_t h = h0; h < h1; h++, n++) {
                q[n] = c->q + j * c->q_stride + h * c->D;
                L[n] = c->past + j + 1;
                out[n] = c->out + (j * c->H + h) * c->D;
            }
        const size_t kv = (size_t)g * (size_t)c->cap * (size_t)c->D;
        c->k->attend(q, L, n, c->k_cache + kv, c->v_cache + kv, c->D, c->scale, scores, c->span, out);
        u += j1 - j0;
    }
}

static int attention_shape_ok(int64_t q_stride, int64_t kv_stride, int64_t M, int64_t H, int64_t KV, int64_t D,
                              int64_t cap, int64_t past) {
    return M >= 0 && H > 0 && KV > 0 && H % KV == 0 && H / KV <= SF_ATTEND_MAX && D > 0 && D % SF_LANES == 0 &&
           D <= 512 && past >= 0 && past + M <= cap && q_stride >= H * D && kv_stride >= KV * D;
}

/* sf_attention, checked by the caller; under the call lock. */
static int attention_locked(const struct sf_kernels *kern, float *q, int64_t q_stride, float *k, const float *v,
                            int64_t kv_stride, int64_t M, int64_t H, int64_t KV, int64_t D, const float *cos,
                            const float *sin, float *k_cache, float *v_cache, int64_t cap, int64_t past, float scale,
                            float *out) {
    for (int64_t j = 0; j < M; j++) {
        kern->rope(q + j * q_stride, H, D, cos + j * D, sin + j * D);
        kern->rope(k + j * kv_stride, KV, D, cos + j * D, sin + j * D);
        for (int64_t g = 0; g < KV; g++) {
            const size_t at = ((size_t)g * (size_t)cap + (size_t)(past + j)) * (size_t)D;
            memcpy(k_cache + at, k + j * kv_stride + g * D, (size_t)D * sizeof(float));
            memcpy(v_cache + at, v + j * kv_stride + g * D, (size_t)D * sizeof(float));
        }
    }
    /* a share: 32k multiply-adds at least */
    const int64_t work = M * H * (past + M) * D * 8 / SF_MIN_SHARE_VALUES, group = H / KV;
    const int64_t threads = sf_job_shares(work, M * H);  /* what a share a query would get */
    int64_t parts = (threads + KV * M - 1) / (KV * M);
    parts = parts < 1 ? 1 : parts > group ? group : parts;
    const int64_t part_heads = (group + parts - 1) / parts;
    parts = (group + part_heads - 1) / part_heads;
    const int64_t batch_rows = M < SF_ATTEND_MAX / part_heads ? M : SF_ATTEND_MAX / part_heads;
    const int shares = sf_job_shares(work, KV * parts * M);
    if (sf_scratch_grow(&attn_scratch, &attn_scratch_cap,
                        (size_t)shares * (size_t)(batch_rows * part_heads) * (size_t)(past + M) * sizeof(float)) == NULL)
        return SF_ENOMEM;
    const struct attn_ctx c = {kern, q, k_cache, v_cache, q_stride, M, H, group, parts, part_heads, D, cap, past,
                               past + M, batch_rows, scale, out};
    const struct sf_job jb = {attn_share, &c, shares};
    sf_run_job(&jb);
    return SF_OK;
}

int sf_attention(float *q, int64_t q_stride, float *k, const float *v, int64_t kv_stride, int64_t M, int64_t H,
                 int64_t KV, int64_t D, const float *cos, const float *sin, float *k_cache, float *v_cache,
                 int64_t cap, int64_t past, float scale, float *out) {
    if (!attention_shape_ok(q_stride, kv_stride, M, H, KV, D, cap, past)) return SF_EBADSHAPE;
    if (M == 0) return SF_OK;
    if (q == NULL || k == NULL || v == NULL || cos == NULL || sin == NULL || k_cache == NULL || v_cache == NULL ||
        out == NULL)
        return SF_ENULL;
    const struct sf_kernels *kern = sf_current_kernels();
    sf_lock_call();
    const int rc = attention_locked(kern, q, q_stride, k, v, kv_stride, M, H, KV, D, cos, sin, k_cache, v_cache,
                                    cap, past, scale, out);
    sf_unlock_call();
    return rc;
}

/* ---- a whole decoder layer ---- */

atomic_int sf_stop_requested;  /* sf_request_stop; read between a layer step's products and inside them */
static _Thread_local int listening;  /* sf_listen_for_stop: this thread's steps honour it */

void sf_request_stop(void) { atomic_store(&sf_stop_requested, 1); }
void sf_clear_stop(void) { atomic_store(&sf_stop_requested, 0); }
void sf_listen_for_stop(int on) { listening = on != 0; }

static int stopping(void) { return listening && atomic_load_explicit(&sf_stop_requested, memory_order_relaxed); }

struct silu_ctx {
    const struct sf_kernels *k;
    const float *gate_up;
    int64_t F;
    float *out;
};

static void silu_rows(const void *p, int64_t a, int64_t b) {
    const struct silu_ctx *c = p;
    c->k->silu_mul(c->gate_up + a * 2 * c->F, b - a, c->F, c->out + a * c->F);
}

static void *layer_scratch;       /* the layer's rows between its steps; under the call lock */
static size_t layer_scratch_cap;

/* y [M, N] (rows ldy apart) += b [N]; b NULL: nothing. */
static void add_bias(float *y, int64_t M, int64_t N, int64_t ldy, const float *b) {
    if (b == NULL) return;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) y[m * ldy + n] += b[n];
}

/* The matrices of `parts` side by side: y [M, sum N] (rows ldy apart) = x . [W0 | W1 ..]^T. */
static int parts_locked(const struct sf_kernels *k, const struct sf_matrix *parts, int n, int64_t K,
                        const float *x, int64_t M, float *y, int64_t ldy) {
    int64_t col = 0;
    for (int i = 0; i < n; i++) {
        const int rc = sf_matmul_locked(k, parts[i].type, parts[i].w, parts[i].N, K, x, M, y + col, ldy, listening);
        if (rc != SF_OK) return rc;
        col += parts[i].N;
    }
    return SF_OK;
}

static int64_t parts_width(const struct sf_matrix *parts, int n) {
    int64_t width = 0;
    for (int i = 0; i < n; i++) width += parts[i].N;
    return width;
}

static int parts_ok(const struct sf_matrix *parts, int n, int64_t K, int64_t M) {
    if (n < 1 || n > 3) return SF_EBADSHAPE;
    for (int i = 0; i < n; i++) {
        if (!sf_type_supported(parts[i].type)) return SF_EBADTYPE;
        if (!sf_matmul_shape_ok(parts[i].type, parts[i].N, K, M) || parts[i].N == 0) return SF_EBADSHAPE;
        if (parts[i].w == NULL) return SF_ENULL;
    }
    return SF_OK;
}

static int layer_ok(const struct sf_layer *L, int64_t M, int64_t cap, int64_t past) {
    const int64_t H = L->heads, KV = L->kv_heads, D = L->head_dim, width = L->hidden;
    if (width <= 0 || width % SF_LANES != 0 || L->ffn <= 0 || M < 0) return SF_EBADSHAPE;
    if (L->attn_norm == NULL || L->ffn_norm == NULL) return SF_ENULL;
    int rc;
    if ((rc = parts_ok(L->qkv, L->n_qkv, width, M)) != SF_OK || (rc = parts_ok(&L->o, 1, H * D, M)) != SF_OK ||
        (rc = parts_ok(L->gate_up, L->n_gate_up, width, M)) != SF_OK || (rc = parts_ok(&L->down, 1, L->ffn, M)) != SF_OK)
        return rc;
    const int64_t qkv = (H + 2 * KV) * D;
    if (parts_width(L->qkv, L->n_qkv) != qkv || L->o.N != width || parts_width(L->gate_up, L->n_gate_up) != 2 * L->ffn ||
        L->down.N != width || !attention_shape_ok(qkv, qkv, M, H, KV, D, cap, past))
        return SF_EBADSHAPE;
    return SF_OK;
}

int sf_layer_step(const struct sf_layer *L, float *x, int64_t M, const float *cos, const float *sin,
                  float *k_cache, float *v_cache, int64_t cap, int64_t past) {
    if (L == NULL) return SF_ENULL;
    int rc = layer_ok(L, M, cap, past);
    if (rc != SF_OK || M == 0) return rc;
    if (x == NULL || cos == NULL || sin == NULL || k_cache == NULL || v_cache == NULL) return SF_ENULL;
    if (stopping()) return SF_ESTOPPED;
    const struct sf_kernels *k = sf_current_kernels();
    const int64_t width = L->hidden, H = L->heads, KV = L->kv_heads, D = L->head_dim, F = L->ffn;
    const int64_t qkv_w = (H + 2 * KV) * D;
    const size_t floats = (size_t)M * (size_t)(2 * width + qkv_w + H * D + 3 * F);

    sf_lock_call();
    float *h = sf_scratch_grow(&layer_scratch, &layer_scratch_cap, floats * sizeof(float));
    if (h == NULL) {
        sf_unlock_call();
        return SF_ENOMEM;
    }
    float *t = h + M * width, *qkv = t + M * width, *att = qkv + M * qkv_w, *gate_up = att + M * H * D,
          *act = gate_up + M * 2 * F;
    /* the same steps, in the same order, as native_layers' torch composition of the calls above */
    k->rmsnorm(x, L->attn_norm, M, width, L->eps, h);
    if ((rc = parts_locked(k, L->qkv, L->n_qkv, width, h, M, qkv, qkv_w)) != SF_OK) goto done;
    if (stopping()) { rc = SF_ESTOPPED; goto done; }
    add_bias(qkv, M, qkv_w, qkv_w, L->qkv_bias);
    rc = attention_locked(k, qkv, qkv_w, qkv + H * D, qkv + (H + KV) * D, qkv_w, M, H, KV, D, cos, sin, k_cache,
                          v_cache, cap, past, L->scale, att);
    if (rc == SF_OK && stopping()) rc = SF_ESTOPPED;
    if (rc != SF_OK || (rc = sf_matmul_locked(k, L->o.type, L->o.w, width, H * D, att, M, t, width, listening)) != SF_OK) goto done;
    add_bias(t, M, width, width, L->o_bias);
    for (int64_t i = 0; i < M * width; i++) x[i] = x[i] + t[i];
    if (stopping()) { rc = SF_ESTOPPED; goto done; }
    k->rmsnorm(x, L->ffn_norm, M, width, L->eps, h);
    if ((rc = parts_locked(k, L->gate_up, L->n_gate_up, width, h, M, gate_up, 2 * F)) != SF_OK) goto done;
    if (stopping()) { rc = SF_ESTOPPED; goto done; }
    add_bias(gate_up, M, 2 * F, 2 * F, L->gate_up_bias);
    const struct silu_ctx sc = {k, gate_up, F, act};
    sf_run_rows(silu_rows, &sc, M, F);
    if ((rc = sf_matmul_locked(k, L->down.type, L->down.w, width, F, act, M, t, width, listening)) != SF_OK) goto done;
    add_bias(t, M, width, width, L->down_bias);
    for (int64_t i = 0; i < M * width; i++) x[i] = x[i] + t[i];
done:
    sf_unlock_call();
    return rc;
}
