#include "ops/embedding.h"

#include "core/error.h"
#include "core/quant.h"

namespace deltabit::cpu {

void embedding_lookup(const WeightView& table, const int32_t* ids, int64_t n_tokens, float* out) {
    for (int64_t t = 0; t < n_tokens; ++t) {
        // Token ids come from tokenizers and requests; an id past the vocabulary must not read past the table.
        if (ids[t] < 0 || ids[t] >= table.rows) {
            fail("embedding_lookup: token {} has id {}, outside the vocabulary of {}", t, ids[t], table.rows);
        }
        dequantize_row(table.dtype, table.row(ids[t]), out + t * table.cols, table.cols);
    }
}

}  // namespace deltabit::cpu
