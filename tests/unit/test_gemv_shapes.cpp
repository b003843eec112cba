// ops/matmul/gemv_shapes.h: the dispatcher both decode GEMV kernels pick their instantiation through. Every shape a
// kernel exists for reaches the instantiation of exactly that (dtype, lanes, rows); every other shape, and
// rows 4 for a SwiGLU pair, gets `none`. Host code only, so it runs on every machine.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "core/dtype.h"
#include "ops/matmul/gemv_shapes.h"

namespace deltabit {
namespace {

struct Instantiation {
    DType t;
    int lanes, rows;
};
using Picked = std::optional<Instantiation>;

template <bool kSwiglu>
Picked pick(DType t, int lanes, int rows) {
    return cuda::pick_gemv_shape<kSwiglu>(
        t, lanes, rows,
        [](auto shape) -> Picked {
            using S = decltype(shape);
            return Instantiation{S::type, S::lanes, S::rows};
        },
        Picked{});
}

constexpr DType kGemvTypes[] = {DType::Q1_0, DType::Q2_0, DType::Q2_0_G64, DType::Q4_0, DType::Q8_0};

TEST(GemvShapes, EverySupportedShapeReachesItsOwnInstantiation) {
    for (DType t : kGemvTypes) {
        for (int lanes : {8, 16, 32}) {
            for (int rows : {2, 4}) {
                const std::string what =
                    std::string(dtype_name(t)) + " lanes " + std::to_string(lanes) + " rows " + std::to_string(rows);
                const Picked plain = pick<false>(t, lanes, rows);
                ASSERT_TRUE(plain.has_value()) << what;
                EXPECT_EQ(plain->t, t) << what;
                EXPECT_EQ(plain->lanes, lanes) << what;
                EXPECT_EQ(plain->rows, rows) << what;
                const Picked swiglu = pick<true>(t, lanes, rows);
                if (rows == 2) {
                    ASSERT_TRUE(swiglu.has_value()) << what << " (swiglu)";
                    EXPECT_EQ(swiglu->t, t) << what;
                    EXPECT_EQ(swiglu->lanes, lanes) << what;
                    EXPECT_EQ(swiglu->rows, 2) << what;
                } else {
                    EXPECT_FALSE(swiglu.has_value()) << what << ": a SwiGLU pair takes 2 rows a thread";
                }
            }
        }
    }
}

TEST(GemvShapes, OtherShapesAndTypesGetNone) {
    for (int lanes : {0, 4, 12, 64}) EXPECT_FALSE(pick<false>(DType::Q1_0, lanes, 2).has_value()) << lanes;
    for (int rows : {0, 1, 3, 8}) EXPECT_FALSE(pick<false>(DType::Q1_0, 16, rows).has_value()) << rows;
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32}) {
        EXPECT_FALSE(pick<false>(t, 16, 2).has_value()) << dtype_name(t);
        EXPECT_FALSE(pick<true>(t, 16, 2).has_value()) << dtype_name(t);
    }
}

}  // namespace
}  // namespace deltabit
