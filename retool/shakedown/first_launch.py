"""verl's checkpoint callback for a shakedown's RL stage: the first launch ends right after step 1's checkpoint.

``configs/shakedown/rl.yaml`` names it as ``trainer.checkpoint_callback_class``; verl calls ``on_save`` on the driver
after every checkpoint. After the checkpoint of step 1 of a longer run it lowers the trainer's step count to 1, so
verl's loop ends after that step as a finished run does (its metrics logged, the run closed, exit status 0); the
launcher then launches again in the same RUN_DIR (retool/shakedown/relaunch.py), which resumes from step 1's
checkpoint and runs step 2: a real resume at the cost of no extra step. The relaunch, which starts after step 1,
saves only step 2 and is left alone.
"""

from __future__ import annotations

from verl.trainer.ppo.checkpoint_callback import CheckpointCallback


class StopAfterFirstCheckpoint(CheckpointCallback):
    def on_save(self, trainer, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs) -> None:
        if global_step == 1 and trainer.total_training_steps > 1:
            trainer.total_training_steps = 1
            print(
                f"[shakedown] step 1 saved in {checkpoint_dir}: this launch ends here; the launcher starts again "
                "in the same RUN_DIR to resume from it",
                flush=True,
            )
