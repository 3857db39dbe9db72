/* Prints, as JSON, what lsp_server/kernels/native/__init__.py mirrors of specfill_kernels.h:
 * the enums' values and the layout of struct sf_layer / sf_matrix as this compiler lays
 * them out. test_native_mirrors.py builds it and compares. */
#include <stddef.h>
#include <stdio.h>

#include "specfill_kernels.h"

#define VALUE(name) printf("%s\"%s\": %d", first ? "" : ", ", #name, (int)(name)), first = 0
#define FIELD(type, name) \
    printf("%s\"%s\": [%zu, %zu]", first ? "" : ", ", #name, offsetof(type, name), sizeof(((type *)0)->name)), first = 0

int main(void) {
    int first = 1;
    printf("{\"types\": {");
    VALUE(SF_Q4_0); VALUE(SF_Q5_0); VALUE(SF_Q8_0); VALUE(SF_Q4_K); VALUE(SF_Q6_K);
    VALUE(SF_Q4_0_X8); VALUE(SF_Q5_0_X8); VALUE(SF_Q8_0_X8); VALUE(SF_Q4_K_X8); VALUE(SF_Q6_K_X8);
    first = 1;
    printf("}, \"variants\": {");
    VALUE(SF_SCALAR); VALUE(SF_AVX2); VALUE(SF_AVX512); VALUE(SF_NEON); VALUE(SF_NVARIANTS);
    first = 1;
    printf("}, \"errors\": {");
    VALUE(SF_OK); VALUE(SF_EBADTYPE); VALUE(SF_EBADSHAPE); VALUE(SF_ENULL); VALUE(SF_ENOMEM); VALUE(SF_ESTOPPED);
    first = 1;
    printf("}, \"sf_matrix\": {\"size\": %zu, \"fields\": {", sizeof(struct sf_matrix));
    FIELD(struct sf_matrix, type); FIELD(struct sf_matrix, w); FIELD(struct sf_matrix, N);
    first = 1;
    printf("}}, \"sf_layer\": {\"size\": %zu, \"fields\": {", sizeof(struct sf_layer));
    FIELD(struct sf_layer, qkv); FIELD(struct sf_layer, n_qkv); FIELD(struct sf_layer, o);
    FIELD(struct sf_layer, gate_up); FIELD(struct sf_layer, n_gate_up); FIELD(struct sf_layer, down);
    FIELD(struct sf_layer, qkv_bias); FIELD(struct sf_layer, o_bias); FIELD(struct sf_layer, gate_up_bias);
    FIELD(struct sf_layer, down_bias); FIELD(struct sf_layer, attn_norm); FIELD(struct sf_layer, ffn_norm);
    FIELD(struct sf_layer, eps); FIELD(struct sf_layer, hidden); FIELD(struct sf_layer, heads);
    FIELD(struct sf_layer, kv_heads); FIELD(struct sf_layer, head_dim); FIELD(struct sf_layer, ffn);
    FIELD(struct sf_layer, scale);
    printf("}}}\n");
    return 0;
}
