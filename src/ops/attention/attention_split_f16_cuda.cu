// The register split kernels (ops/attention/attention_split_register.cuh) over an f16 cache: one of three
// translation units, one per cache element, so that the kernels' many instantiations compile in parallel.
#include "ops/attention/attention_split_register.cuh"

namespace deltabit::cuda {

void launch_register_split_f16(dim3 grid, const SplitArgs& args, int64_t group, bool keys, cudaStream_t stream) {
    attention_split_detail::launch_split<attention_split_detail::PlainRows<__half>>(grid, args, group, keys, stream);
}

}  // namespace deltabit::cuda
