"""Failure accounting: every failed trajectory counted per step by cause, and the run stopped when failures say it is
not learning what it should.

verl 0.9.1's v1 trainer catches any exception inside a trajectory, logs it and trains on (padding the group in sync
mode, refilling it in the async modes), so a broken reward or a dead sandbox would cost a 12-18 hour run silently.
The pieces, each plugged into verl through one of its hooks (configs/rl.yaml):

- causes    the causes, the configuration errors, the advice per cause (no verl, no Ray);
- ledger    a Ray actor where failed trajectories are recorded as they happen;
- worker    ``agent_loop_manager_class``: verl's agent-loop workers, recording each failed trajectory;
- sampler   ``trainer.v1.sampler.custom_sampler``: verl's replay buffer of the trainer mode, counting the failures
            of each step, logging them (TensorBoard ``failures/...``, the console line, ``logs/failures.jsonl``,
            the first traceback of each cause) and stopping the run by the rules in ``limits``;
- limits    the stop rules and the step record (no verl, no Ray);
- preflight what can be checked before verl starts (``python -m retool.failures.preflight``, run by the launcher).
"""
