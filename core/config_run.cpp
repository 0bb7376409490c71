// The [checkpoint] and [logging] sections: what a run saves and records, their
// keys and the rules across them.
#include "core/config.h"
#include "core/config_rules.h"
#include "core/config_schema.h"

#include <string>
#include <vector>

#include "core/json.h"

namespace trident {

namespace config_rules {

std::vector<Field> checkpoint_fields() {
  return {
      TRIDENT_FIELD(checkpoint, dir, any(), "checkpoint directory (saved at the end of the run); empty disables"),
      TRIDENT_FIELD(checkpoint, interval, at_least(0), "also save every N steps; 0 = only at the end of the run"),
      TRIDENT_FIELD(checkpoint, keep, at_least(1), "complete checkpoints kept in dir; older ones are deleted"),
      TRIDENT_FIELD(checkpoint, resume, any(),
                    "continue from the latest checkpoint in dir, saved under any layout (none yet: start at step 0)"),
      TRIDENT_FIELD(checkpoint, async, any(),
                    "interval saves: copy the state to host memory, write and publish it on a background thread "
                    "while training goes on (at most one in flight); a run's last save is synchronous"),
  };
}

std::vector<Field> logging_fields() {
  return {
      TRIDENT_FIELD(logging, dir, any(), "run directory: config.toml, metrics.jsonl, loss.svg, rank-R.json"),
      TRIDENT_FIELD(logging, log_interval, at_least(1),
                    "log every N steps (and the last and each evaluation step): a step line and a metrics.jsonl row"),
      TRIDENT_FIELD(logging, progress, any(), "progress bar when stdout is a terminal"),
      TRIDENT_FIELD(logging, trace, any(), "write trace.json and timeline.svg of step trace_step"),
      TRIDENT_FIELD(logging, trace_step, at_least(1), "the step logging.trace records"),
      TRIDENT_FIELD(logging, tensorboard, any(),
                    "also write each metrics.jsonl row to dir/events.out.tfevents.<time>.<host> for TensorBoard "
                    "(scalars tagged with its keys)"),
  };
}

void check_checkpoint(const Config& c) {
  if (c.checkpoint.interval > 0 && c.checkpoint.dir.empty())
    fail(c, "checkpoint.interval = " + n(c.checkpoint.interval) + " needs checkpoint.dir");
  if (c.checkpoint.resume && c.checkpoint.dir.empty()) fail(c, "checkpoint.resume = true needs checkpoint.dir");
  if (c.checkpoint.async && c.checkpoint.dir.empty()) fail(c, "checkpoint.async = true needs checkpoint.dir");
  if (c.checkpoint.async && c.checkpoint.interval == 0)
    fail(c, "checkpoint.async = true writes the checkpoint.interval saves in the background, but checkpoint.interval = 0: "
            "the only save is the run's last, which is synchronous; expected checkpoint.interval > 0");
  if (c.training.exit_after_steps > 0 && c.checkpoint.dir.empty())
    fail(c, "training.exit_after_steps = " + n(c.training.exit_after_steps) +
                " needs checkpoint.dir: the run would stop with nothing to continue from");
  if (c.training.exit_after_steps >= c.training.steps && c.training.exit_after_steps > 0)
    fail(c, "training.exit_after_steps = " + n(c.training.exit_after_steps) + " is not before training.steps = " +
                n(c.training.steps) + ": expected 0 (off) or a step in [1, " + n(c.training.steps - 1) + "]");
}

}  // namespace config_rules

}  // namespace trident
