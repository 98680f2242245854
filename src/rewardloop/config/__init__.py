"""Load and validate the workflow config against ``schemas/config.schema.yaml``.

Validation fills defaults (nested ones included), rejects unknown keys and wrong types with a
message naming the key, then runs the checks a schema cannot express (files exist, prompts fit
the rewards). Every check runs before any job starts.

By concern: ``schema`` (the schema, its strict validator, ConfigError), ``command_line`` (typing of
``--config`` strings), ``defaults`` (what the family and the paths fill in), ``checks`` (the checks
beyond the schema; their heavy imports stay inside them, so importing this package loads no torch),
``loading`` (complete, validate, load). What each job reads of the config lives beside the workflow's
other job wiring, in ``rewardloop.runtime.job_config``; it is re-exported here for its callers.
"""

from rewardloop.config.checks import (OVERLAP_IDS, check_existing_iterations, check_objective, check_results_layout,
                                      check_semantics, check_shards, check_train_nodes, prompt_overlap,
                                      refuse_moved_keys, startup_warnings)
from rewardloop.config.loading import complete, load, validate
from rewardloop.config.schema import SCHEMA_PATH, ConfigError, load_schema
from rewardloop.mappings import deep_merge  # config.deep_merge: recipes, tests
from rewardloop.runtime.job_config import (JOB_SPLIT_KEYS, eval_config, guidance_evals, input_identities,
                                           stage_config)

__all__ = [
    "ConfigError", "JOB_SPLIT_KEYS", "OVERLAP_IDS", "SCHEMA_PATH", "check_existing_iterations", "check_objective",
    "check_results_layout", "check_semantics", "check_shards", "check_train_nodes", "complete", "deep_merge", "eval_config", "guidance_evals", "input_identities",
    "load", "load_schema", "prompt_overlap", "refuse_moved_keys", "stage_config", "startup_warnings", "validate",
]
