#!/usr/bin/env python3
"""tools/cuda_emulation on real code, emulated on the host against naive references: gemm_q1_0_small
(src/ops/matmul/gemm_small_cuda.cu: u8·s8 mma fragments, a cp.async ring, static and dynamic shared memory) and
the staged split-K decode attention (attention_split_staged_cuda.cu: ldmatrix, ldmatrix .trans and f16 mma
fragments, a swizzled ring, programmatic launch) and the binary GEMV fed from a ring (gemv_b1_staged_cuda.cu:
b1 mma fragments, a cp.async ring per warp, scales copied as 4-byte words) agree, and so does the block-diffusion step
(runtime/diffusion_step_cuda.cu) with the CPU step; copies with a planted bug — fragment indices off by one,
a row mask off by one, a cp.async wait one group short, barriers in divergent code, ties ranked out of order,
a prefix sum one chunk late, the wide small-GEMM kernel's scale half, chunk wait and summation order — are
caught; the thread
model's own primitives give hand-worked answers; and every inline-asm wrapper of the real headers has a
stand-in. Skipped where g++ cannot build C++20."""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TOOL = os.path.join(ROOT, "tools", "cuda_emulation")
GEMM = os.path.join(ROOT, "src", "ops", "matmul", "gemm_small_cuda.cu")
ATTENTION = os.path.join(ROOT, "src", "ops", "attention", "attention_split_staged_cuda.cu")
DIFFUSION_STEP = os.path.join(ROOT, "src", "runtime", "diffusion_step_cuda.cu")
GEMV_B1_STAGED = os.path.join(ROOT, "src", "ops", "matmul", "gemv_b1_staged_cuda.cu")
CXX = shutil.which("g++")
FLAGS = ["-std=c++20", "-O1", "-pthread", "-Wno-unknown-pragmas", "-DFMT_HEADER_ONLY"]
# Wrappers of the real headers with no stand-in, and why.
NOT_EMULATED = {"cp_async_mbarrier_arrive": "mbarriers are not emulated"}


def read(path):
    with open(path) as f:
        return f.read()


def cxx_works():
    if CXX is None:
        return False
    probe = "#include <source_location>\n#include <fmt/format.h>\nint main() { return 0; }\n"
    result = subprocess.run([CXX, *FLAGS, "-x", "c++", "-", "-o", os.devnull], input=probe, capture_output=True,
                            text=True)
    return result.returncode == 0


@unittest.skipUnless(cxx_works(), "needs g++ with C++20 and fmt")
class CudaEmulationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="cuda_emulation_")
        cls.gemm_driver = [cls.compile_object(os.path.join(HERE, "cuda_emulation_gemm_small.cpp"), []),
                           cls.compile_object(os.path.join(ROOT, "src", "core", "dtype.cpp"), []),
                           cls.compile_object(os.path.join(ROOT, "src", "core", "env_switch.cpp"), [])]
        cls.attention_driver = [cls.compile_object(os.path.join(HERE, "cuda_emulation_attention_staged.cpp"), [])]
        cls.gemv_b1_staged_driver = [
            cls.compile_object(os.path.join(HERE, "cuda_emulation_gemv_b1_staged.cpp"), []),
            cls.compile_object(os.path.join(ROOT, "src", "core", "dtype.cpp"), [])]
        cls.diffusion_driver = [cls.compile_object(os.path.join(HERE, "cuda_emulation_diffusion_step.cpp"), []),
                                cls.compile_object(os.path.join(ROOT, "src", "runtime", "diffusion_step.cpp"), [])]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    @classmethod
    def compile_object(cls, source, includes):
        obj = os.path.join(cls.dir, os.path.basename(source) + f".{len(os.listdir(cls.dir))}.o")
        include_flags = [f"-I{d}" for d in [*includes, os.path.join(TOOL, "include"), os.path.join(ROOT, "src")]]
        subprocess.run([CXX, *FLAGS, *include_flags, "-c", source, "-o", obj], check=True)
        return obj

    def emulate(self, source, objects=()):
        """Transforms `source`, builds it with `objects` and runs it: (exit status, output)."""
        out = tempfile.mkdtemp(dir=self.dir)
        subprocess.run(["python3", os.path.join(TOOL, "transform.py"), source, out], check=True)
        cpp = os.path.join(out, os.path.splitext(os.path.basename(source))[0] + ".cpp")
        kernel = self.compile_object(cpp, [os.path.join(out, "include")])
        binary = os.path.join(out, "run")
        subprocess.run([CXX, "-pthread", kernel, *objects, "-o", binary], check=True)
        result = subprocess.run([binary], capture_output=True, text=True, timeout=120)
        return result.returncode, result.stdout + result.stderr

    def emulate_kernel(self, kernel, driver, old=None, new=None):
        """`kernel`, or a copy with the one occurrence of `old` replaced by `new`, against `driver`."""
        source = kernel
        if old is not None:
            text = read(kernel)
            self.assertEqual(text.count(old), 1, f"the kernel changed: update the planted bug ({old!r})")
            source = os.path.join(tempfile.mkdtemp(dir=self.dir), os.path.basename(kernel))
            with open(source, "w") as f:
                f.write(text.replace(old, new))
        return self.emulate(source, driver)

    def emulate_gemm(self, old=None, new=None):
        return self.emulate_kernel(GEMM, self.gemm_driver, old, new)

    def emulate_attention(self, old=None, new=None):
        return self.emulate_kernel(ATTENTION, self.attention_driver, old, new)

    def test_gemm_agrees_with_the_reference(self):
        status, out = self.emulate_gemm()
        self.assertEqual(status, 0, out)
        self.assertEqual(out.count("agrees"), 20, out)  # 5 shapes × split, wide64, wide128, wide256

    def test_wide_kernel_scale_at_the_wrong_half_is_caught(self):
        # The wide kernels' scales: a row whose chunk starts at the odd half of a word reads its neighbour's.
        status, out = self.emulate_gemm("half = parity[m][h] + i;", "half = i;")
        self.assertEqual(status, 1, out)
        self.assertIn("wide64: DISAGREES", out)
        self.assertIn("wide128: DISAGREES", out)
        self.assertIn("wide256: DISAGREES", out)
        self.assertNotIn("split: DISAGREES", out)

    def test_wide_kernel_reading_a_chunk_before_it_lands_is_caught(self):
        status, out = self.emulate_gemm("cp_async_wait_group<kWideBuffers - 2>();",
                                        "cp_async_wait_group<kWideBuffers - 1>();")
        self.assertEqual(status, 1, out)
        self.assertIn("= nan", out.replace("-nan", "nan"))

    def test_wide_kernel_summing_in_another_order_is_caught(self):
        # One accumulator for every group: within the reference's bound, but not the split kernel's bits.
        status, out = self.emulate_gemm("group_terms(acc[i], codes, d, b, meta, t, T);",
                                        "group_terms(acc[0], codes, d, b, meta, t, T);")
        self.assertEqual(status, 1, out)
        self.assertIn("differs from split in its bits", out)

    def test_fragment_index_off_by_one_is_caught(self):
        status, out = self.emulate_gemm("b[2 * ks + 1] = x[8 * ks + 4];", "b[2 * ks + 1] = x[8 * ks + 3];")
        self.assertEqual(status, 1, out)
        self.assertIn("DISAGREES", out)

    def test_row_mask_off_by_one_is_caught(self):
        status, out = self.emulate_gemm("row0 + r >= a.n) continue;", "row0 + r > a.n) continue;")
        self.assertEqual(status, 1, out)
        self.assertIn("guard float 0 after y overwritten", out)

    def test_reading_a_stage_before_its_copies_land_is_caught(self):
        # One group too few waited for: the stage read is still in flight, so it reads the poison (NaN).
        status, out = self.emulate_gemm("cp_async_wait_group<kStages - 2>();", "cp_async_wait_group<kStages - 1>();")
        self.assertEqual(status, 1, out)
        self.assertIn("= nan", out.replace("-nan", "nan"))

    def test_warp_barrier_in_divergent_code_is_reported(self):
        status, out = self.emulate_gemm("        __syncwarp();", "        if (lane < 16) __syncwarp();")
        self.assertEqual(status, 3, out)
        self.assertRegex(out, r"warp collective at .*gemm_small_cuda.cu:\d+ while other threads wait at "
                              r".*gemm_small_cuda.cu:\d+: threads at different barriers")

    def test_block_barrier_skipped_by_some_threads_is_reported(self):
        status, out = self.emulate_gemm("    }\n    __syncthreads();\n", "    }\n    if (warp > 0) __syncthreads();\n")
        self.assertEqual(status, 3, out)
        self.assertRegex(out, r"returned while \d+ threads wait at a __syncthreads|__syncthreads reached after")

    def test_staged_attention_agrees_with_the_reference(self):
        status, out = self.emulate_attention()
        self.assertEqual(status, 0, out)
        self.assertEqual(out.count("agrees"), 4, out)

    def test_transposed_fragment_index_bug_is_caught(self):
        # V's ldmatrix .trans addresses: lanes 8..15 give the second 8 dims, not lanes 16..23.
        status, out = self.emulate_attention("v_dim = ((lane >> 3) & 1) * 8;", "v_dim = ((lane >> 4) & 1) * 8;")
        self.assertEqual(status, 1, out)
        self.assertEqual(out.count("f16 d="), out.count("DISAGREES"), out)

    def emulate_gemv_b1_staged(self, old=None, new=None):
        return self.emulate_kernel(GEMV_B1_STAGED, self.gemv_b1_staged_driver, old, new)

    def test_gemv_b1_staged_agrees_with_the_reference_and_the_b1_order(self):
        status, out = self.emulate_gemv_b1_staged()
        self.assertEqual(status, 0, out)
        self.assertEqual(out.count("agrees"), 48, out)

    def test_gemv_b1_staged_stage_read_before_its_copies_land_is_caught(self):
        status, out = self.emulate_gemv_b1_staged("cp_async_wait_group<kStages - 1>();", "cp_async_wait_group<kStages>();")
        self.assertEqual(status, 1, out)
        self.assertIn("= nan", out.replace("-nan", "nan"))

    def test_gemv_b1_staged_lanes_reading_before_the_warp_barrier_is_caught(self):
        # The lanes read each other's copies: without the barrier after the wait one reads a copy not yet landed.
        status, out = self.emulate_gemv_b1_staged("                __syncwarp();                        // and the other",
                                                  "                // and the other")
        self.assertEqual(status, 1, out)
        self.assertIn("DISAGREES", out)

    def test_gemv_b1_staged_scale_word_offset_bug_is_caught(self):
        # A run of scales starting mid-word read as if it started at the word.
        status, out = self.emulate_gemv_b1_staged(
            "const int byte1 = int((scales + 2 * uintptr_t((row0 + 8) * a.units + u0)) & 2) + 2 * t;",
            "const int byte1 = 2 * t;")
        self.assertEqual(status, 1, out)
        self.assertIn("gemv_q1_0_b1's order gives", out)

    def emulate_diffusion_step(self, old=None, new=None):
        return self.emulate_kernel(DIFFUSION_STEP, self.diffusion_driver, old, new)

    def test_diffusion_step_agrees_with_the_cpu_step(self):
        status, out = self.emulate_diffusion_step()
        self.assertEqual(status, 0, out)
        self.assertEqual(out.count("rows agree"), 13, out)
        self.assertEqual(out.count("settle agrees"), 6, out)
        for part in ["units agree", "boundary draws agree", "whole step agrees", "refused: "]:
            self.assertIn(part, out)

    def test_diffusion_acceptance_tie_order_bug_is_caught(self):
        # Ties ranked by descending position: the stable order of the CPU's sort is lost.
        status, out = self.emulate_diffusion_step("(a == b && ia < ib)", "(a == b && ia > ib)")
        self.assertEqual(status, 1, out)
        self.assertIn("ties, threshold 1: accepted", out)

    def test_diffusion_sample_prefix_bug_is_caught(self):
        # An inclusive prefix where the exclusive one belongs: each thread's running sum starts one chunk late.
        status, out = self.emulate_diffusion_step("carry, t > 0 ? scan[t - 1] : 0.0)", "carry, scan[t])")
        self.assertEqual(status, 1, out)
        self.assertRegex(out, r"DISAGREES: sample \w+ row \d+")

    def test_thread_model_primitives(self):
        status, out = self.emulate(os.path.join(HERE, "cuda_emulation_primitives.cu"))
        self.assertEqual(status, 0, out)
        self.assertIn("primitives agree", out)

    def test_every_inline_asm_wrapper_has_a_stand_in(self):
        for header in ["async_copy.cuh", "tensor_core.cuh"]:
            real = read(os.path.join(ROOT, "src", "ops", "cuda", header))
            stand_in = read(os.path.join(TOOL, "include", "ops", "cuda", header))
            for name in re.findall(r"__device__ __forceinline__ \w+ (\w+)\(", real):
                if name not in NOT_EMULATED:
                    self.assertRegex(stand_in, rf"\b{name}\(", f"{header}: no stand-in for {name}")


if __name__ == "__main__":
    unittest.main()
