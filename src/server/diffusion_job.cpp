#include "server/diffusion_job.h"

#include "text/tokenizer_stream.h"

namespace deltabit::server {

DiffusionJobResult run_diffusion_job(DiffusionRunner& runner, const text::Tokenizer& tokenizer, Job& job,
                                     std::chrono::steady_clock::time_point deadline,
                                     const std::function<bool()>& stopping) {
    DiffusionJobResult result;
    JobEvent& done = result.done;
    done.kind = JobEvent::Kind::done;
    done.prompt_tokens = int64_t(job.prompt.size());

    // The text of each block as `deltabit run` prints it (cmd_text_run.cpp): skip_special, the visible
    // tokens only, the detokenizer's rest with the block that ends the reply — the block with the EOS, or
    // the last the loop will commit — so that every committed block is one event and nothing trails.
    const int64_t canvas = runner.config().canvas_length;
    const int64_t max_new = job.options.max_tokens.value_or(runner.settings().max_new_tokens);
    const int64_t planned_blocks = (max_new + canvas - 1) / canvas;
    text::StreamingDetokenizer detokenizer(tokenizer, text::DecodeOptions{.skip_special = true});
    bool ended = false;
    const auto on_block = [&](std::span<const int32_t> block, int64_t steps) {
        ++result.blocks;
        result.denoising_steps += steps;
        if (ended) return;  // the loop stops at the block holding an EOS; nothing follows it
        const std::span<const int32_t> visible = diffusion_visible_tokens(block, runner.settings());
        ended = visible.size() < block.size();
        done.completion_tokens += int64_t(visible.size()) + (ended ? 1 : 0);
        JobEvent event;
        event.kind = JobEvent::Kind::token;
        event.token = block.empty() ? 0 : block.back();
        for (int32_t id : visible) event.text += detokenizer.push(id);
        if (ended || result.blocks == planned_blocks) event.text += detokenizer.finish();
        job.push(std::move(event));
    };
    const char* stopped_by = nullptr;
    const auto stop = [&] {
        if (job.cancelled() || stopping()) stopped_by = "cancelled";
        else if (std::chrono::steady_clock::now() > deadline) stopped_by = "deadline";
        return stopped_by != nullptr;
    };
    try {
        const DiffusionRun run = runner.generate(job.prompt, job.options.sampling.seed, on_block, {}, stop, max_new);
        result.seconds = run.generate_ms / 1e3;
        if (run.generation.stopped) {
            // The unfinished block's steps count as work done.
            if (!run.generation.steps_per_block.empty()) result.denoising_steps += run.generation.steps_per_block.back();
            done.finish = stopped_by ? stopped_by : "cancelled";
        } else {
            done.finish = run.generation.finished ? "stop" : "length";
        }
    } catch (const std::exception& e) {
        done.kind = JobEvent::Kind::error;
        done.status = 500;
        done.message = e.what();
    }
    return result;  // the caller sends `done`
}

}  // namespace deltabit::server
