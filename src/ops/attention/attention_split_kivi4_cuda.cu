// The register split kernels (ops/attention/attention_split_register.cuh) over a kivi4 cache (sinks and window
// exact, the middle dequantised as it is read): one of three translation units, one per cache element, so
// that the kernels' many instantiations compile in parallel.
#include "ops/attention/attention_split_register.cuh"

namespace deltabit::cuda {

void launch_register_split_kivi4(dim3 grid, const SplitArgs& args, int64_t group, bool keys, cudaStream_t stream) {
    attention_split_detail::launch_split<attention_split_detail::KiviRows>(grid, args, group, keys, stream);
}

}  // namespace deltabit::cuda
