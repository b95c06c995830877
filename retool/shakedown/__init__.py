"""The shakedown: the long run's own config for a handful of steps, and a checklist that says whether it will work.

``SHAKEDOWN=1`` on any launcher (scripts/launch.sh applies ``configs/shakedown/<stage>.yaml`` last):

- SFT: 5 steps, verl saves the last; then ``merge.py`` merges that checkpoint to Hugging Face format and loads it.
- RL (``MODEL_PATH`` = that merge): validation on 8 AIME problems x 2, then step 1 and its checkpoint, where the
  first launch ends (``first_launch.py``, verl's checkpoint callback); ``relaunch.py`` has the launcher start again
  in the same ``RUN_DIR``: a real resume through retool/resume.py and verl's own loading, which runs step 2.

``retool-shakedown RUN_DIR`` (``cli.py``) reads what the run left in its folder (``runfolder.py``) and prints the
checklist (``checks.py``), each line pass or fail with its evidence, and the full run's wall time projected from the
measured step, save, validation and start-up times (``projection.py``). It reads a CPU smoke folder too: a smoke is
not asked to resume, and the checklist says so.

Files in the run folder besides verl's: ``logs/launches.jsonl`` (every launch: its kind, start, end),
``shakedown/<stage>.full.yaml`` (the stage's config without the shakedown: what the checklist compares with and
projects to), ``logs/merge.json`` (the merge and its load), ``shakedown/resume.json`` (the first launch's end).
"""
