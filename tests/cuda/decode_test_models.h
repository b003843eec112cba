// Models for the decode tests (test_decode_*.cpp, test_memory_flat_cuda.cpp): a fixture as it is, or
// with every matrix whose rows are whole groups of 128 quantised to Q1_0 (models/q1_fixture.h, not exact), so
// the GPU runs the int8 GEMV path that real 1-bit models take. The Q1_0 copy is NOT the fixture's model any
// more (rounding is not checked, unlike the parity test's exact binarised copy): these tests compare the
// GPU against itself (graph vs eager, saved vs uninterrupted), never against transformers.
#pragma once

#include <string>

#include "models/fixture.h"
#include "models/model.h"
#include "models/q1_fixture.h"

namespace deltabit::test {

inline Model load_fixture_model(const std::string& name, bool q1_matrices) {
    Model hf = Model::load(fixtures_dir() / name);
    return q1_matrices ? with_q1_matrices(hf, /*exact=*/false) : std::move(hf);
}

}  // namespace deltabit::test
